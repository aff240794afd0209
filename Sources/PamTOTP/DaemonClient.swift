import CLibc
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

// Asking pam-totpd (docs/ARCHITECTURE.md, section 5.2): MFAWire's DaemonConnection carries the frames.

func askDaemon(_ request: DaemonRequest, socket path: [UInt8]) -> DaemonReply {
    do throws(MFAError) {
        guard var frame = request.encoded() else { throw .daemon("request too large to send") }
        defer { wipe(&frame) }
        let timeout = request.operation == .send ? DaemonConnection.sendTimeoutMilliseconds : DaemonConnection.timeoutMilliseconds
        return try DaemonReply.decode(try DaemonConnection.exchange(frame, socket: path, replyMagic: DaemonProtocol.replyMagic,
                                                                    timeout: timeout))
    } catch {
        return .outcome(.failed(error))
    }
}
