/// The package's version, printed by `appattest --version` and `appattest-dev --version` (CHANGELOG.md lists what
/// each version brought).
package let appAttestVersion = "0.1.0"
