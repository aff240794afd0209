/// The decision the PAM module makes, without any PAM: look the user up, then check an answer.
/// The module calls `lookup`, prompts (unless `nullok` applies), then calls `check`.
public enum Enrollment {
    case enrolled(UserRecord)
    case unenrolled
    case failed(MFAError)
}

public enum AuthOutcome: Equatable {
    /// The answer matched `factor` at time step `step`.
    case success(factor: [UInt8], step: UInt64)
    /// Enrolled, but the answer matched no factor in the window.
    case wrongCode
    /// No record for the user (and no `nullok`, or the caller would not have asked).
    case unenrolled
    case failed(MFAError)
}

public enum Authenticator {
    public static func lookup(user: [UInt8], options: ModuleOptions) -> Enrollment {
        do throws(MFAError) {
            try Store.validate(user: user)
        } catch {
            // A name that cannot be a record cannot be enrolled.
            return .unenrolled
        }
        do throws(MFAError) {
            let store = try Store(path: options.store)
            guard let record = try store.read(user: user), !record.factors.isEmpty else { return .unenrolled }
            return .enrolled(record)
        } catch {
            return .failed(error)
        }
    }

    /// Checks `answer` against every factor (all of them, so timing does not reveal which
    /// factor or whether any matched early). Unenrolled users cost the same work against a
    /// throwaway key, so the time to deny does not reveal enrolment either.
    public static func check(_ enrollment: Enrollment, answer: [UInt8], at unixTime: Int64,
                             options: ModuleOptions) -> AuthOutcome {
        let verifier: TOTPVerifier
        do throws(MFAError) {
            verifier = try TOTPVerifier(adjacentIntervals: options.adjacentIntervals)
        } catch {
            return .failed(error)
        }
        switch enrollment {
        case .failed(let e):
            return .failed(e)
        case .unenrolled:
            let decoy = HMACKey(algorithm: .sha1, key: [UInt8](repeating: 0, count: 20))
            _ = try? verifier.verify(answer: answer, key: decoy, parameters: .default, at: unixTime)
            return .unenrolled
        case .enrolled(let record):
            var match: AuthOutcome = .wrongCode
            for factor in record.factors {
                let key = HMACKey(algorithm: factor.parameters.algorithm, key: factor.secret)
                do throws(MFAError) {
                    if let step = try verifier.verify(answer: answer, key: key, parameters: factor.parameters,
                                                      at: unixTime),
                       match == .wrongCode {
                        match = .success(factor: factor.label, step: step)
                    }
                } catch {
                    return .failed(error)
                }
            }
            return match
        }
    }
}
