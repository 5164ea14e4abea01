#if HTTP
public import AppAttest
public import AppAttestLifecycle

/// A protected request that report-only enforcement let through unverified (`AppAttestService.Enforcement.report`):
/// what would have refused it.
///
/// The middleware of either framework runs the route with no verified device and this report as
/// ``AppAttestReport/current``; `appattest serve` answers 200 with `"enforced": false` and the refusal's code. Routes
/// that act on a device's identity must treat such a request as unverified.
public struct AppAttestReport: Sendable, Hashable {
    /// The refusal that was not enforced.
    public let problem: AppAttestProblem
    /// The key the request named, when it named one that decodes.
    public let keyID: KeyID?

    /// A report.
    public init(problem: AppAttestProblem, keyID: KeyID?) {
        self.problem = problem
        self.keyID = keyID
    }

    /// The report of the request being handled, while its route runs behind a middleware in report mode; nil when the
    /// request was verified, or runs behind no middleware.
    @TaskLocal public static var current: AppAttestReport?
}

/// What became of a protected request under its App ID's enforcement.
public enum AppAttestAdmission: Sendable, Hashable {
    /// Verified: the device, and the header fields for the response.
    case verified(AppAttestAuthentication)
    /// Refused, but its App ID reports rather than enforces: the request runs, unverified.
    case reported(AppAttestReport)
}

/// What became of an assertion under its App ID's enforcement (`appattest serve`'s verification operation).
public enum AppAttestVerdict: Sendable, Hashable {
    /// Verified, and its counter accepted.
    case verified(AuthenticatedAssertion)
    /// Refused, but its App ID reports rather than enforces.
    case reported(AppAttestReport)
}
#endif  // HTTP
