#if FUZZING
import Foundation

private let target: FuzzTarget = {
    let name = ProcessInfo.processInfo.environment["FUZZ_ENTRY"] ?? "attestation"
    guard let target = FuzzTarget(rawValue: name) else {
        fatalError("FUZZ_ENTRY must be one of \(FuzzTarget.allCases)")
    }
    return target
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = size == 0 || data == nil ? [] : Array(UnsafeBufferPointer(start: data, count: size))
    target.run(bytes)
    return 0
}

@_silgen_name("LLVMFuzzerRunDriver")
func runLibFuzzer(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

// SwiftPM links executables with `main` pointing at `<module>_main`; hand control to libFuzzer's driver there.
@_cdecl("appattest_fuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return runLibFuzzer(&count, &arguments, fuzzTestOneInput)
}
#endif
