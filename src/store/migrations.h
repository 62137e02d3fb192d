// Numbered schema migrations of the store (SQLite file or PostgreSQL database). The `schema_version` table
// records every applied version; opening a database applies only the missing ones, each in its own
// transaction that first takes the migration lock (concurrent front ends never both migrate).
#pragma once

#include "common/status.h"
#include "store/sql_statement.h"

namespace tinkerd::store {

// The newest schema version this build knows.
int latest_schema_version();

// Applies every migration newer than the database's version; returns the resulting version.
// A database written by a newer build (version above latest) is an error.
Result<int> run_migrations(SqlConnection & conn);

}  // namespace tinkerd::store
