#if os(Linux) || os(macOS)
package import Foundation

/// Waits for a child process without holding one of Swift's cooperative threads: every suite's servers and clients run
/// on that pool, which has one thread per core, so a test blocked in `waitUntilExit` or in a pipe's read stalls them
/// all (tests of the commands and of `appattest serve`).
package enum ProcessWait {
    /// Everything `process` writes to `pipe` until it exits (the pipe read on a thread of its own), once it has exited.
    package static func output(of process: Process, from pipe: Pipe) async -> Data {
        let reader = pipe.fileHandleForReading
        let data = await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: reader.readDataToEndOfFile()) }
        }
        await exit(of: process)
        return data
    }

    /// Returns once `process` has exited, or at once when the test is cancelled (the process then stopped, not
    /// waited for: a loop that no longer sleeps would hold the pool's thread).
    package static func exit(of process: Process) async {
        while process.isRunning {
            guard (try? await Task.sleep(for: .milliseconds(5))) != nil else {
                if process.isRunning { process.terminate() }
                return
            }
        }
    }

    /// Sends `process` SIGTERM if it is still running, and returns once it has exited.
    package static func stop(_ process: Process) async {
        if process.isRunning { process.terminate() }
        await exit(of: process)
    }
}
#endif
