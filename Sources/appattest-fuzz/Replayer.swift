// Built normally, this program replays inputs (crash reproducers, a corpus) through one entry point:
//     appattest-fuzz ENTRY FILE...        (ENTRY: cbor, authdata, attestation, assertion)
// Built by Fuzz/run.sh with -sanitize=fuzzer and -D FUZZING, libFuzzer drives LLVMFuzzerTestOneInput instead, with
// the entry point chosen by the FUZZ_ENTRY environment variable.
#if !FUZZING
import Foundation

@main
struct Replayer {
    static func main() {
        let arguments = CommandLine.arguments.dropFirst()
        guard let name = arguments.first, let target = FuzzTarget(rawValue: name) else {
            FileHandle.standardError.write(
                Data("usage: appattest-fuzz cbor|authdata|attestation|assertion FILE...\n".utf8))
            exit(64)
        }
        var count = 0
        for path in arguments.dropFirst() {
            let url = URL(fileURLWithPath: path)
            let files: [URL]
            if (try? url.resourceValues(forKeys: [.isDirectoryKey]).isDirectory) == true {
                files =
                    (try? FileManager.default.contentsOfDirectory(at: url, includingPropertiesForKeys: nil)) ?? []
            } else {
                files = [url]
            }
            for file in files {
                guard let data = try? Data(contentsOf: file) else { continue }
                target.run(Array(data))
                count += 1
            }
        }
        print("\(count) inputs replayed through \(target.rawValue) without a crash")
    }
}
#endif
