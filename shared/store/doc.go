// Package store is deepcode's one durable store: a single SQLite file in WAL
// mode shared by several processes (manager, agentd, scheduler, ...).
//
// Open validates the path, creates the file privately (0600), opens it with
// the ncruces/go-sqlite3 driver (busy timeout, WAL, foreign keys,
// synchronous=normal, BEGIN IMMEDIATE for write transactions) and applies the
// embedded schema migrations. PRAGMA user_version is the schema version.
//
// # Migrations
//
// Migrations live in one place: schema/migrations/NNNN_<name>.sql (package
// schema, which the manager reads the version from without SQLite),
// numbered from 0001 without gaps. Each migration is applied on one dedicated
// connection inside its own BEGIN IMMEDIATE transaction that re-reads
// user_version first, so when several processes open a fresh file at once
// every migration runs exactly once. The same transaction sets
// PRAGMA user_version = N and runs PRAGMA foreign_key_check; a violation rolls
// the migration back. Because a migration runs inside a transaction, it cannot
// toggle PRAGMA foreign_keys: a migration that rebuilds a table referenced by
// foreign keys must copy rows so that no ON DELETE action fires. A file whose
// user_version is above LatestSchemaVersion was written by a newer deepcode
// and is refused with SCHEMA_TOO_NEW.
//
// # Leases
//
// The leases table coordinates processes: a lease has a name, a holder, an
// expiry and a fencing token that grows by one each time the lease changes
// hands (it survives release). A writer that may have lost its lease writes
// only through Fenced, which checks holder, token and expiry in the same
// IMMEDIATE transaction as its writes.
//
// # Errors
//
// Every error returned is an *errs.Error (or wraps one): INVALID_DATABASE_PATH,
// SCHEMA_TOO_NEW, LEASE_HELD (retryable), LEASE_LOST, INVALID_PARAMS,
// SERVICE_UNAVAILABLE (retryable: the database stayed locked beyond the busy
// timeout, or the context ended) and INTERNAL.
package store
