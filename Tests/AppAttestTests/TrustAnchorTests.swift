import AppAttest
import Foundation
import Testing

@Suite("Trust anchor")
struct TrustAnchorTests {
    @Test("the embedded root is Apple App Attestation Root CA, pinned by its SHA-256")
    func pinned() throws {
        let der = TrustAnchor.appleAppAttestationRoot.derRepresentation
        #expect(
            AppAttestSHA256.hash(der).hexString == "1cb9823ba28ba6ad2d33a006941de2ae4f513ef1d4e831b9f7e0fa7b6242c932")
        let summary = try CertificateSummary(derEncoded: der)
        #expect(summary.subject == "ST=California,O=Apple Inc.,CN=Apple App Attestation Root CA")
        #expect(summary.subject == summary.issuer)
        #expect(summary.publicKeyCurve == "secp384r1")
        #expect(summary.serialNumber == "0bf3be0ef1cdd2e0fb8c6e721f621798")
        #expect(summary.notAfter == ISO8601DateFormatter().date(from: "2045-03-15T00:00:00Z"))
        #expect(TrustAnchor.appleAppAttestationRoot.isAppleAppAttestationRoot)
    }

    @Test("the embedded root equals the PEM published with the vectors")
    func matchesPEM() throws {
        let pem = try String(
            contentsOf: testVectorsDirectory.appendingPathComponent("apple_app_attestation_root_ca.pem"),
            encoding: .utf8)
        let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        #expect(Data(base64Encoded: body).map(Array.init) == TrustAnchor.appleAppAttestationRoot.derRepresentation)
    }

    @Test("a custom root is never mistaken for Apple's")
    func custom() {
        #expect(!TrustAnchor.customRootForTesting(derRepresentation: [0x30, 0x00]).isAppleAppAttestationRoot)
    }
}
