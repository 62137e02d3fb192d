// The few differences between SQLite's SQL (the one the store's queries and migrations are written in) and
// PostgreSQL's, isolated here: parameter placeholders and the column types of migration scripts.
#pragma once

#include <string>

namespace tinkerd::store {

// "?N" -> "$N" and a bare "?" -> "$k" (k counting from 1), outside string literals.
std::string postgres_placeholders(const std::string & sql);

// A SQLite migration script in PostgreSQL's types: INTEGER -> BIGINT (64-bit, as SQLite's), REAL -> DOUBLE
// PRECISION, BLOB -> BYTEA, x'' -> ''::bytea, "INTEGER PRIMARY KEY" -> an identity column, and every
// created table gets SQLite's implicit `rowid` (an identity column) that the queries order ties by.
std::string postgres_ddl(const std::string & script);

}  // namespace tinkerd::store
