import AppAttestCommandSupport
import AppAttestVectors
import ArgumentParser
import Foundation

/// `appattest vectors [run] FILE...` (`appattest-dev vectors generate` writes synthetic ones).
struct VectorsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vectors",
        abstract: "Run test-vector files (TestVectors/README.md format).",
        subcommands: [RunVectors.self],
        defaultSubcommand: RunVectors.self
    )
}

/// `appattest vectors FILE...`: runs vector files through the library.
struct RunVectors: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run test-vector files (TestVectors/README.md format) through the library.",
        discussion: """
            Prints one line per vector (id, expected, got), then `N passed, N failed`. Exits with status 1 when \
            any vector's outcome or reason differs from its expectation, or a file cannot be read.
            """
    )

    @Argument(help: "Vector files to run.")
    var files: [String]

    func run() throws {
        var passed = 0
        var failed = 0
        for path in files {
            let file: TestVectorFile
            do {
                file = try TestVectorFile(jsonData: try readInput(path, limit: TestVectorFile.maximumFileSize))
            } catch {
                print("FAIL \(Terminal.safe(path)): \(Terminal.safe("\(error)"))")
                failed += 1
                continue
            }
            for outcome in TestVectorRunner(file: file).run() {
                print(Terminal.safe(outcome.description))
                if outcome.passed { passed += 1 } else { failed += 1 }
            }
        }
        print("\(passed) passed, \(failed) failed")
        if failed > 0 { throw ExitCode(1) }
    }
}
