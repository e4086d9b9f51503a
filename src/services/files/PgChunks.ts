import type * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Effect, Option, Schema, Stream } from "effect"
import type { GatewayError } from "../../domain/Errors.js"
import { fromDb, isGatewayError, storageFailed } from "./Common.js"

/**
 * File bytes in PostgreSQL: a file is its rows of `file_chunks` in order, about 256 KiB each, so a
 * file is never whole in memory on the way in or out. Uncommitted bytes belong to a
 * `file_stages` row (a one-request upload, or an unfinished resumable one).
 */

/** bytes gathered before a chunk row is written */
export const CHUNK_BYTES = 256 * 1024

const ChunkKey = Schema.Struct({ file_id: Schema.String, n: Schema.Number })

export const makeChunks = (sql: SqlClient.SqlClient) => {
  // a stage dropped meanwhile (revoked key, expiry on another replica) takes no more chunks
  const insertChunk = SqlSchema.findOne({
    Request: Schema.Struct({ ...ChunkKey.fields, data: Schema.Uint8ArrayFromSelf }),
    Result: Schema.Struct({ n: Schema.Number }),
    execute: ({ data, file_id, n }) =>
      sql`INSERT INTO file_chunks (file_id, n, data) SELECT ${file_id}, ${n}::integer, ${data}::bytea WHERE EXISTS (SELECT 1 FROM file_stages WHERE file_id = ${file_id}) RETURNING n`
  })
  const chunkAt = SqlSchema.findOne({
    Request: ChunkKey,
    Result: Schema.Struct({ data: Schema.Uint8ArrayFromSelf }),
    execute: ({ file_id, n }) => sql`SELECT data FROM file_chunks WHERE file_id = ${file_id} AND n = ${n}`
  })
  const insertStage = SqlSchema.void({
    Request: Schema.Struct({ file_id: Schema.String, started_at: Schema.Number }),
    execute: (row) => sql`INSERT INTO file_stages ${sql.insert(row)}`
  })
  const deleteStages = SqlSchema.void({ Request: Schema.Array(Schema.String), execute: (ids) => sql`DELETE FROM file_stages WHERE ${sql.in("file_id", ids)}` })
  const deleteChunksOf = SqlSchema.void({ Request: Schema.Array(Schema.String), execute: (ids) => sql`DELETE FROM file_chunks WHERE ${sql.in("file_id", ids)}` })
  const deleteChunksFrom = SqlSchema.void({ Request: ChunkKey, execute: ({ file_id, n }) => sql`DELETE FROM file_chunks WHERE file_id = ${file_id} AND n >= ${n}` })

  /** Appends bytes as chunk rows from chunk `n`: gathered to about 256 KiB, the rest written by `flush`. */
  const writer = (fileId: string, n: number) => {
    let pending: Array<Uint8Array> = []
    let pendingBytes = 0
    let next = n
    const flush = Effect.suspend(() => {
      if (pendingBytes === 0) return Effect.void
      const data = Buffer.concat(pending, pendingBytes)
      pending = []
      pendingBytes = 0
      const at = next
      next += 1
      return fromDb(insertChunk({ file_id: fileId, n: at, data })).pipe(
        Effect.flatMap(Option.match({ onNone: () => Effect.fail(storageFailed()), onSome: () => Effect.void }))
      )
    })
    return {
      append: (chunk: Uint8Array): Effect.Effect<void, GatewayError> => {
        pending.push(chunk)
        pendingBytes += chunk.length
        return pendingBytes >= CHUNK_BYTES ? flush : Effect.void
      },
      flush,
      /** chunk rows written (the next one's `n`) */
      chunks: () => next
    }
  }

  /** Every chunk of a file in order, `bytes` in all (a missing chunk fails: the file went meanwhile). */
  const read = (fileId: string, bytes: number): Stream.Stream<Uint8Array, GatewayError> =>
    Stream.unfoldEffect({ n: 0, sent: 0 }, ({ n, sent }) =>
      sent >= bytes
        ? Effect.succeed(Option.none())
        : fromDb(chunkAt({ file_id: fileId, n })).pipe(
            Effect.flatMap(
              Option.match({
                onNone: () => Effect.fail(storageFailed()),
                onSome: ({ data }) => Effect.succeed(Option.some([data, { n: n + 1, sent: sent + data.length }] as const))
              })
            )
          )
    )

  /** The pieces of an upload's body as a stream, failing with the body's own refusal (timeouts, size). */
  const pieces = (source: AsyncIterable<Uint8Array>) => Stream.fromAsyncIterable(source, (error) => (isGatewayError(error) ? error : storageFailed()))

  return {
    writer,
    read,
    pieces,
    startStage: (fileId: string, now: number) => insertStage({ file_id: fileId, started_at: now }),
    /** stages' rows and chunks, gone in one transaction */
    dropStages: (ids: ReadonlyArray<string>) =>
      ids.length === 0 ? Effect.void : sql.withTransaction(Effect.zipRight(deleteStages(ids), deleteChunksOf(ids))),
    deleteChunksOf,
    deleteChunksFrom
  }
}

export type Chunks = ReturnType<typeof makeChunks>
