#if PostgreSQL
public import AppAttest
public import AppAttestStore
import AppAttestSQLSupport
public import Foundation
import Logging
import PostgresNIO
import Synchronization

extension PostgresAppAttestStore {
    public func insertKey(_ record: KeyRecord, maximumKeysPerUser: Int?) async throws(StoreError) -> KeyInsertion {
        let keyID = Data(record.keyID.rawValue), userID = record.userID, appID = record.key.appID.rawValue
        let environment = record.key.environment.rawValue, publicKey = Data(record.key.publicKey.x963Representation),
            counter = Int64(record.key.counter)
        let receipt = Data(record.receipt), metric = record.riskMetric.map(Int64.init)
        let created = record.createdAt.timeIntervalSince1970, updated = record.receiptUpdatedAt.timeIntervalSince1970
        let revoked = record.revokedAt?.timeIntervalSince1970
        let newKey = record.keyID.base64EncodedString, keep = maximumKeysPerUser.map { Int64(max(0, $0 - 1)) }
        let outcome = try await perform { connection, logger -> [Data]? in
            try await connection.withTransaction(logger: logger) { connection -> [Data]? in
                if let userID, keep != nil {
                    // One registration of a user of an App ID at a time, so that concurrent ones never leave more
                    // active keys than the limit (each would otherwise count without the other's uncommitted key).
                    let owner = "\(appID) \(userID)"
                    try await connection.query(
                        "SELECT pg_advisory_xact_lock(hashtextextended(\(owner), 7061)::bigint)", logger: logger)
                }
                let rows = try await connection.query(
                    """
                    INSERT INTO app_attest_keys (key_id, user_id, app_id, environment, public_key, counter, receipt, risk_metric,
                                                 created_at, receipt_updated_at, revoked_at)
                    VALUES (\(keyID), \(userID), \(appID), \(environment), \(publicKey), \(counter), \(receipt), \(metric),
                            \(created), \(updated), \(revoked))
                    ON CONFLICT (key_id) DO NOTHING RETURNING 1
                    """, logger: logger)
                var count = 0
                for try await _ in rows { count += 1 }
                guard count == 1 else { return nil }
                try await connection.query(
                    """
                    INSERT INTO app_attest_key_events (key_id, kind, time, detail)
                    VALUES (\(keyID), \(KeyEvent.Kind.attested.rawValue), \(created), NULL)
                    """, logger: logger)
                guard let userID, let keep else { return [] }
                var superseded: [Data] = []
                for try await old in try await connection.query(
                    """
                    UPDATE app_attest_keys SET revoked_at = \(created) WHERE revoked_at IS NULL AND key_id IN (
                        SELECT key_id FROM app_attest_keys
                        WHERE user_id = \(userID) AND app_id = \(appID) AND revoked_at IS NULL AND key_id <> \(keyID)
                        ORDER BY created_at DESC, key_id DESC OFFSET \(keep))
                    RETURNING key_id
                    """, logger: logger
                ).decode(Data.self) {
                    superseded.append(old)
                }
                for old in superseded {
                    try await connection.query(
                        """
                        INSERT INTO app_attest_key_events (key_id, kind, time, detail)
                        VALUES (\(old), \(KeyEvent.Kind.superseded.rawValue), \(created), \(newKey))
                        """, logger: logger)
                }
                return superseded
            }
        }
        if let outcome {
            var superseded: [KeyID] = []
            for data in outcome { superseded.append(try Self.keyID(data)) }
            return .inserted(superseding: superseded)
        }
        guard let existing = try await key(record.keyID) else {
            throw StoreError(.corrupted, "a key that conflicts but cannot be read")
        }
        return .duplicate(existing)
    }

    typealias KeyRow = (Data, String?, String, String, Data, Int64, Data, Int64?, Double, Double, Double?)
    static let keyColumns = keyColumns(receipt: "receipt")

    /// The columns of a ``KeyRow``, in its order, with `receipt` in the receipt's place (a column, or an expression).
    static func keyColumns(receipt: String) -> String {
        "key_id, user_id, app_id, environment, public_key, counter, \(receipt), risk_metric, created_at, "
            + "receipt_updated_at, revoked_at"
    }

    public func key(_ keyID: KeyID) async throws(StoreError) -> KeyRecord? {
        try await keys(withIDs: [keyID]).first
    }

    public func keys(withIDs keyIDs: [KeyID]) async throws(StoreError) -> [KeyRecord] {
        try await keys(KeysByID(keyIDs: keyIDs.map { ByteBuffer(bytes: $0.rawValue) }))
    }

    package func keysWithoutReceipts(withIDs keyIDs: [KeyID]) async throws(StoreError) -> [KeyRecord] {
        try await keys(KeysWithoutReceiptsByID(keyIDs: keyIDs.map { ByteBuffer(bytes: $0.rawValue) }))
    }

    private func keys(_ statement: some KeysByIDStatement) async throws(StoreError) -> [KeyRecord] {
        guard !statement.keyIDs.isEmpty else { return [] }
        let rows = try await perform { connection, logger -> [KeyRow] in
            try await Session(connection: connection, logger: logger).execute(statement)
        }
        return try Self.records(rows)
    }

    /// The keys with these ids, in one prepared statement.
    struct KeysByID: KeysByIDStatement {
        static let name = "app_attest_keys_by_id_v1"
        static let sql = "SELECT \(keyColumns) FROM app_attest_keys WHERE key_id = ANY($1::bytea[])"
        let keyIDs: [ByteBuffer]
    }

    /// The keys with these ids, each with an empty receipt, in one prepared statement: a cache miss's read, alone or
    /// with others'. A real receipt is stored out of line (TOAST): left there, a read is one index lookup and one heap
    /// page per key.
    struct KeysWithoutReceiptsByID: KeysByIDStatement {
        static let name = "app_attest_keys_without_receipts_by_id_v1"
        static let sql =
            "SELECT \(keyColumns(receipt: "''::bytea")) FROM app_attest_keys WHERE key_id = ANY($1::bytea[])"
        let keyIDs: [ByteBuffer]
    }

    public func keys(forUser userID: String) async throws(StoreError) -> [KeyRecord] {
        try await fetchKeys { connection, logger in
            try await connection.query(
                "SELECT \(unescaped: Self.keyColumns) FROM app_attest_keys WHERE user_id = \(userID) ORDER BY created_at, key_id",
                logger: logger)
        }
    }

    public func revokeKey(_ keyID: KeyID, at time: Date, reason: String?) async throws(StoreError) -> Bool {
        let bytes = Data(keyID.rawValue), seconds = time.timeIntervalSince1970
        let kind = KeyEvent.Kind.revoked.rawValue,
            detail = KeyEvent(keyID: keyID, kind: .revoked, time: time, detail: reason).detail
        return try await affected { connection, logger in
            try await connection.query(
                """
                WITH revoked AS (
                    UPDATE app_attest_keys SET revoked_at = \(seconds) WHERE key_id = \(bytes) AND revoked_at IS NULL
                    RETURNING key_id)
                INSERT INTO app_attest_key_events (key_id, kind, time, detail)
                SELECT key_id, \(kind), \(seconds), \(detail) FROM revoked RETURNING 1
                """, logger: logger)
        }
    }

    public func updateReceipt(_ keyID: KeyID, receipt: [UInt8], riskMetric: Int?, at time: Date)
        async throws(StoreError) -> Bool
    {
        let bytes = Data(keyID.rawValue), data = Data(receipt), metric = riskMetric.map(Int64.init)
        let seconds = time.timeIntervalSince1970
        let kind = KeyEvent.Kind.receiptRefreshed.rawValue, detail = riskMetric.map { "\($0)" }
        return try await affected { connection, logger in
            try await connection.query(
                """
                WITH updated AS (
                    UPDATE app_attest_keys SET receipt = \(data), risk_metric = \(metric), receipt_updated_at = \(seconds)
                    WHERE key_id = \(bytes) AND revoked_at IS NULL RETURNING key_id)
                INSERT INTO app_attest_key_events (key_id, kind, time, detail)
                SELECT key_id, \(kind), \(seconds), \(detail) FROM updated RETURNING 1
                """, logger: logger)
        }
    }
}

extension PostgresAppAttestStore: KeyReadsWithoutReceipts {}

/// A read of keys by their ids, with their receipts or without.
protocol KeysByIDStatement: PostgresPreparedStatement where Row == PostgresAppAttestStore.KeyRow {
    var keyIDs: [ByteBuffer] { get }
}

extension KeysByIDStatement {
    func makeBindings() throws -> PostgresBindings {
        var binds = PostgresBindings(capacity: 1)
        binds.append(keyIDs)
        return binds
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}
#endif  // PostgreSQL
