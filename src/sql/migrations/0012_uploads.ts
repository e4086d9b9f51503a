import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/**
 * Unfinished resumable uploads (PostgreSQL), so that any replica takes the next chunk: the bytes
 * received so far are the chunks of the stage `file_id`, `size` and `chunks` say how far it got,
 * and `writing_since` is set while one request writes a chunk (a second one meanwhile is refused,
 * as on one process). SQLite keeps unfinished uploads in memory: nothing to do.
 */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    pg: () =>
      Effect.all([
        sql`CREATE TABLE uploads (
          id TEXT PRIMARY KEY,
          file_id TEXT NOT NULL,
          app TEXT NOT NULL,
          key_id TEXT NOT NULL,
          filename TEXT NOT NULL,
          display_name TEXT,
          declared_type TEXT,
          max_bytes BIGINT NOT NULL,
          size BIGINT NOT NULL DEFAULT 0,
          chunks INTEGER NOT NULL DEFAULT 0,
          writing_since BIGINT,
          created_at BIGINT NOT NULL,
          expires_at BIGINT NOT NULL
        )`,
        sql`CREATE INDEX uploads_app ON uploads (app)`,
        sql`CREATE INDEX uploads_key ON uploads (key_id)`,
        sql`CREATE INDEX uploads_expires ON uploads (expires_at)`
      ], { discard: true }),
    orElse: () => Effect.void
  })
})
