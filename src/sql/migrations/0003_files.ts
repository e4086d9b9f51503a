import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/**
 * Uploaded files: metadata only. The bytes of each file live in `<dataDir>/files/<id>`, written
 * to a temporary name, fsynced and renamed before the row commits.
 */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    pg: () => sql`CREATE TABLE files (
      seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      id TEXT NOT NULL UNIQUE,
      app TEXT NOT NULL,
      filename TEXT NOT NULL,
      display_name TEXT,
      purpose TEXT NOT NULL,
      mime_type TEXT NOT NULL,
      bytes BIGINT NOT NULL,
      created_at BIGINT NOT NULL,
      expires_at BIGINT NOT NULL
    )`,
    orElse: () => sql`CREATE TABLE files (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    app TEXT NOT NULL,
    filename TEXT NOT NULL,
    display_name TEXT,
    purpose TEXT NOT NULL,
    mime_type TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
  )`
  })
  // listings per app in upload order
  yield* sql`CREATE INDEX files_app_seq ON files (app, seq)`
  // the retention sweep
  yield* sql`CREATE INDEX files_expires ON files (expires_at)`
})
