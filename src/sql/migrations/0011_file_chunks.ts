import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/**
 * File bytes in the database (PostgreSQL): each file is its chunks in order, `n` from 0, written
 * as the upload arrives and read back one at a time (a download streams). A file being written has
 * a `file_stages` row until its `files` row commits (in the same transaction that deletes the
 * stage), so chunks are either a committed file's or a stage's, and stages left by a replica that
 * died are swept with their chunks. SQLite keeps the bytes in `<dataDir>/files`: nothing to do.
 */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    pg: () =>
      Effect.all([
        sql`CREATE TABLE file_chunks (
          file_id TEXT NOT NULL,
          n INTEGER NOT NULL,
          data BYTEA NOT NULL,
          PRIMARY KEY (file_id, n)
        )`,
        sql`CREATE TABLE file_stages (file_id TEXT PRIMARY KEY, started_at BIGINT NOT NULL)`,
        sql`CREATE INDEX file_stages_started ON file_stages (started_at)`
      ], { discard: true }),
    orElse: () => Effect.void
  })
})
