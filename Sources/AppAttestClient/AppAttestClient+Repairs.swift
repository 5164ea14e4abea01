internal import AppAttestWire
internal import Crypto
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension AppAttestClient {
    // MARK: Repairs

    enum Repair: String {
        case key, challenge, counter, clock
    }

    /// What the client can repair of a refusal by the server's App Attest layer (a problem document with one of its
    /// codes, before any route ran); nil for any other answer.
    static func repair(for response: HTTPURLResponse, _ data: Data) -> Repair? {
        guard [401, 404, 409].contains(response.statusCode),
            response.value(forHTTPHeaderField: "Content-Type")?.hasPrefix("application/problem+json") == true,
            data.count <= 16 * 1024,
            let problem = try? JSONDecoder().decode(Problem.self, from: data)
        else { return nil }
        switch problem.code {
        case "unknownKey", "keyRevoked": return .key
        case "challengeUnknown", "challengeExpired", "challengeMismatch": return .challenge
        case "counterNotIncreasing", "counterReplayed": return .counter
        case "staleTimestamp": return .clock
        default: return nil
        }
    }

    struct Problem: Decodable {
        var code: String
        var status: Int?
    }

    static func date(_ response: HTTPURLResponse) -> Date? {
        guard let text = response.value(forHTTPHeaderField: "Date") else { return nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: text)
    }
}
