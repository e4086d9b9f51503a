import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/** Replicas seen: each writes its id and the time every few seconds (`/gateway/status` lists the recent ones). */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE replicas (id TEXT PRIMARY KEY, started_at BIGINT NOT NULL, seen_at BIGINT NOT NULL)`
})
