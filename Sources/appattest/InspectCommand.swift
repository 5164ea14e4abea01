import AppAttest
import AppAttestCBOR
import AppAttestCommandSupport
import ArgumentParser
import Foundation

/// `appattest inspect`: decodes an attestation object or an assertion and shows every field.
struct InspectCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "Decode an attestation object or assertion (binary CBOR or Base64) and print every field.",
        discussion: "Decoding verifies nothing: use `appattest verify` for a verdict."
    )

    @Argument(help: "A file holding the object, or - for standard input.")
    var file: String = "-"

    @Flag(help: "Print JSON instead of text.")
    var json = false

    func run() throws {
        let bytes = try readObject(file)
        let report: Report
        do {
            report = try Self.describe(bytes)
        } catch {
            let failure = Report.object([("error", .text(error.code.description)), ("reason", .text(error.reason))])
            print(json ? failure.json() : failure.render(), terminator: json ? "\n" : "")
            throw ExitCode(1)
        }
        print(json ? report.json() : report.render(), terminator: json ? "\n" : "")
    }

    /// An assertion is a map with `signature`; anything else is read as an attestation object, so that its
    /// parser names what is wrong.
    static func describe(_ bytes: [UInt8]) throws(AppAttestError) -> Report {
        let root = try? CBORDecoder(maximumInputSize: AttestationObject.maximumSize).decode(bytes)
        guard root?["signature"] != nil else { return describe(try AttestationObject(cborEncoded: bytes)) }
        let assertion = try AssertionObject(cborEncoded: bytes)
        return .object([
            ("kind", .text("assertion")),
            ("size", .number(Int64(bytes.count))),
            ("signature", .text(assertion.signature.hexString)),
            ("authenticatorData", authenticatorData(assertion.authenticatorData)),
        ])
    }

    static func describe(_ object: AttestationObject) -> Report {
        let certificates: [Report] = object.certificateChain.enumerated().map { index, der in
            let role: Report = .text(index == 0 ? "credCert (leaf)" : "intermediate")
            guard let summary = try? CertificateSummary(derEncoded: der) else {
                return .object([("role", role), ("error", .text("not a parseable certificate (\(der.count) bytes)"))])
            }
            return certificate(summary, role: role, size: der.count)
        }
        return .object([
            ("kind", .text("attestation")),
            ("fmt", .text(object.format)),
            ("certificates", .list(certificates)),
            ("authenticatorData", authenticatorData(object.authenticatorData)),
            ("receipt", receipt(object.receipt)),
        ])
    }

    static func certificate(_ summary: CertificateSummary, role: Report, size: Int) -> Report {
        var fields: [(String, Report)] = [
            ("role", role),
            ("size", .number(Int64(size))),
            ("subject", .text(summary.subject)),
            ("issuer", .text(summary.issuer)),
            ("serialNumber", .text(summary.serialNumber)),
            ("notBefore", .date(summary.notBefore)),
            ("notAfter", .date(summary.notAfter)),
            ("signatureAlgorithm", .text(summary.signatureAlgorithm)),
            (
                "publicKey",
                .object([
                    ("algorithm", .text(summary.publicKeyAlgorithm)),
                    ("curve", .optional(summary.publicKeyCurve)),
                    ("point", .optional(summary.publicKey)),
                ])
            ),
            ("sha256Fingerprint", .text(summary.sha256Fingerprint)),
        ]
        var apple: [(String, Report)] = []
        if let nonce = summary.appAttestNonce { apple.append(("nonce", .text(nonce))) }
        if let appID = summary.appID { apple.append(("appID", .text(appID))) }
        if let osVersion = summary.osVersion { apple.append(("osVersion", .text(osVersion))) }
        if !apple.isEmpty { fields.append(("appleExtensions", .object(apple))) }
        fields.append(
            (
                "extensions",
                .list(
                    summary.extensions.map {
                        .object([
                            ("oid", .text($0.oid)), ("name", .optional($0.name)), ("critical", .bool($0.critical)),
                            ("value", .text($0.value)),
                        ])
                    })
            ))
        return .object(fields)
    }

    static func authenticatorData(_ data: AuthenticatorData) -> Report {
        var flagNames: [Report] = []
        let names: [(AuthenticatorData.Flags, String)] = [
            (.userPresent, "UP"), (.userVerified, "UV"), (.backupEligible, "BE"), (.backupState, "BS"),
            (.attestedCredentialData, "AT"), (.extensionData, "ED"),
        ]
        for (flag, name) in names where data.flags.contains(flag) { flagNames.append(.text(name)) }
        var fields: [(String, Report)] = [
            ("size", .number(Int64(data.rawRepresentation.count))),
            ("rpIdHash", .text(data.rpIDHash.hexString)),
            (
                "flags",
                .object([("value", .text(String(format: "0x%02x", data.flags.rawValue))), ("set", .list(flagNames))])
            ),
            ("counter", .number(Int64(data.counter))),
        ]
        if let credential = data.attestedCredentialData {
            fields += [
                ("aaguid", .text(credential.aaguid.hexString)),
                ("environment", .optional(credential.environment?.rawValue)),
                ("credentialId", .text(credential.credentialID.hexString)),
                ("credentialIdBase64", .text(Data(credential.credentialID).base64EncodedString())),
                ("credentialPublicKey", .cbor(credential.credentialPublicKey)),
            ]
        }
        if let extensions = data.extensions {
            var known: [(String, Report)] = [
                ("bundleVersion", .optional(extensions.bundleVersion)),
                ("validationCategory", extensions.validationCategory.map { .number(Int64($0)) } ?? .null),
            ]
            known.append(("entries", .cbor(.map(extensions.entries))))
            fields.append(("extensions", .object(known)))
        } else {
            fields.append(("extensions", .null))
        }
        return .object(fields)
    }

    static func receipt(_ bytes: [UInt8]) -> Report {
        let encoding: String
        switch bytes.prefix(2) {
        case [0x30, 0x80]: encoding = "BER, indefinite length"
        case _ where bytes.first == 0x30: encoding = "DER, definite length"
        default: encoding = bytes.isEmpty ? "empty" : "not an ASN.1 SEQUENCE"
        }
        var fields: [(String, Report)] = [
            ("size", .number(Int64(bytes.count))),
            ("encoding", .text(encoding)),
            ("sha256", .text(AppAttestSHA256.hash(bytes).hexString)),
        ]
        do {
            fields += receiptFields(try AppAttestReceipt.inspect(bytes))
            fields.append(
                (
                    "note",
                    .text(
                        "signature checked with the embedded signer; chain not validated (use appattest receipt validate)"
                    )
                ))
        } catch {
            fields.append(("error", .text("\(error.code): \(error.reason)")))
        }
        return .object(fields)
    }

    /// The fields of a receipt (“Receipts and the risk metric”).
    static func receiptFields(_ receipt: AppAttestReceipt) -> [(String, Report)] {
        let signer = try? CertificateSummary(derEncoded: receipt.signerCertificate)
        return [
            ("type", .text(receipt.type.description)),
            ("appId", .text(receipt.appID)),
            ("environment", .optional(receipt.environmentName)),
            ("creationTime", .date(receipt.creationTime)),
            ("notBefore", .date(receipt.notBefore)),
            ("expirationTime", .date(receipt.expirationTime)),
            ("riskMetric", receipt.riskMetric.map { .number(Int64($0)) } ?? .null),
            ("clientHash", .text(receipt.clientHash.hexString)),
            ("token", .text(receipt.token)),
            ("attestedPublicKey", .optional(receipt.attestedPublicKey?.hexString)),
            ("signer", .optional(signer?.subject)),
            ("signerNotAfter", .date(signer?.notAfter)),
        ]
    }
}
