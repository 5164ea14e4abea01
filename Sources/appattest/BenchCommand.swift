import ArgumentParser
struct BenchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "bench")
    func run() throws {}
}
