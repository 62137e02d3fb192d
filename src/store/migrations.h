// Numbered schema migrations for tinkerd.db. The `schema_version` table records every applied
// version; opening a database applies only the missing ones, each in its own transaction.
#pragma once

#include <sqlite3.h>

#include "common/status.h"

namespace tinkerd::store {

// The newest schema version this build knows.
int latest_schema_version();

// Applies every migration newer than the database's version; returns the resulting version.
// A database written by a newer build (version above latest) is an error.
Result<int> run_migrations(sqlite3 * db);

}  // namespace tinkerd::store
