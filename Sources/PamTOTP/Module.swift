import CPAM
import MFACore

@_cdecl("pam_sm_authenticate")
public func pam_sm_authenticate(_ pamh: OpaquePointer?, _ flags: Int32, _ argc: Int32,
                                _ argv: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    return probeAdd(1, 1) == 2 ? PAM_SUCCESS : PAM_AUTH_ERR
}
