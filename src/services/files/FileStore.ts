import type * as SqlClient from "@effect/sql/SqlClient"
import { Context, Effect, Layer, type Option, type Scope, type Stream } from "effect"
import type { GatewayError } from "../../domain/Errors.js"
import { Backend } from "../../sql/Database.js"
import type { Log } from "../ops/Log.js"
import { makeDiskFiles } from "./DiskFiles.js"
import { makePgFiles } from "./PgFiles.js"

/** One uploaded file (spec 2.4); the shapes of the three Files APIs are built from it. */
export interface FileRecord {
  /** `file-` + 32 hex */
  readonly id: string
  readonly app: string
  readonly filename: string
  /** Gemini-style `displayName`, when one was given */
  readonly displayName?: string
  /** chat-style purpose (`user_data` for uploads of the other shapes) */
  readonly purpose: string
  /** the type found from the bytes */
  readonly mimeType: string
  readonly bytes: number
  /** epoch ms */
  readonly createdAt: number
  readonly expiresAt: number
}

export type FileKind = "image" | "pdf" | "text"

export const kindOf = (mimeType: string): FileKind => (mimeType.startsWith("image/") ? "image" : mimeType === "application/pdf" ? "pdf" : "text")

/** Caps of the store (spec 8); tests pass smaller ones. */
export interface FileStoreLimits {
  readonly maxFiles: number
  readonly maxBytes: number
  /** one file, never over this whatever the app's body cap */
  readonly maxFileBytes: number
  readonly maxTextBytes: number
  /** saves waiting behind the running one, per app */
  readonly maxWaiting: number
  /** bytes held by the running and waiting saves of an app */
  readonly maxQueuedBytes: number
}

export const defaultFileStoreLimits: FileStoreLimits = {
  maxFiles: 1000,
  maxBytes: 1024 * 1024 * 1024,
  maxFileBytes: 32 * 1024 * 1024,
  maxTextBytes: 4 * 1024 * 1024,
  maxWaiting: 8,
  maxQueuedBytes: 64 * 1024 * 1024
}

/** A file written and checked, not yet visible. */
export interface StagedFile {
  readonly id: string
  readonly bytes: number
  readonly mimeType: string
}

/**
 * An upload being written: bytes are appended (one request body part), then `finish` classifies
 * and makes them durable. Until it is committed the bytes are invisible, and `discard`, a failed
 * write and the store's cleanup remove them.
 */
export interface Stage {
  readonly write: (source: AsyncIterable<Uint8Array>) => Effect.Effect<void, GatewayError>
  readonly size: () => number
  readonly finish: Effect.Effect<StagedFile, GatewayError>
  readonly discard: Effect.Effect<void>
}

export interface StageOptions {
  readonly filename: string
  /** the type the upload declared (the file part's own Content-Type); only text needs it */
  readonly declaredType?: string
  /** the app's body cap; the store's own cap applies too */
  readonly maxBytes: number
}

export interface CommitOptions {
  readonly filename: string
  readonly purpose: string
  readonly displayName?: string
  /** retention; 0 or unset means 30 days */
  readonly maxAgeDays: number
}

export { MAX_UNFINISHED_UPLOADS, UPLOAD_TTL_MS } from "./Common.js"

/** An unfinished resumable upload. */
export interface Upload {
  /** 32 hex, the upload URL's `upload_id` */
  readonly id: string
  readonly app: string
  /** the key that started it: revoking the key drops it */
  readonly keyId: string
  readonly filename: string
  readonly displayName?: string
  /** bytes received so far */
  readonly size: number
}

export interface UploadStart extends StageOptions {
  readonly app: string
  readonly keyId: string
  readonly displayName?: string
}

/** One request's turn at writing an upload's next bytes. */
export interface UploadWrite {
  /** bytes received so far, this request's included */
  readonly size: () => number
  readonly write: (source: AsyncIterable<Uint8Array>) => Effect.Effect<void, GatewayError>
  /** every byte received, checked, as a staged file to commit; the upload is over */
  readonly finish: Effect.Effect<StagedFile, GatewayError>
}

/**
 * Unfinished resumable uploads: in this process on SQLite; in the database on PostgreSQL, where
 * any replica takes the next chunk and the caps hold for the app as a whole.
 */
export interface Uploads {
  /** a new upload; 429 `too_many_uploads` when the app already has 4 unfinished */
  readonly start: (options: UploadStart) => Effect.Effect<Upload, GatewayError>
  /** an unfinished, unexpired upload by id */
  readonly find: (id: string) => Effect.Effect<Option.Option<Upload>, GatewayError>
  /**
   * The upload's writer for the scope's lifetime: 429 `file_saves_busy` while another request
   * writes it, `wrongOffset(size)` when `offset` is not the bytes received so far (unset means at
   * the end). Leaving the scope records the bytes written; a failure drops the upload (its bytes
   * can no longer be trusted to be whole).
   */
  readonly claim: (upload: Upload, offset: number | undefined, wrongOffset: (size: number) => GatewayError) => Effect.Effect<UploadWrite, GatewayError, Scope.Scope>
  /** drop the uploads a key started (the key was revoked) */
  readonly dropKey: (keyId: string) => Effect.Effect<void, GatewayError>
  /** drop every upload past its 10 minutes */
  readonly expire: Effect.Effect<void, GatewayError>
}

export interface FileStoreService {
  /**
   * A place in the app's save queue for the scope's lifetime: at once when no save of the app
   * runs, else after the ones before it; 429 `file_saves_busy` at once when 8 already wait or the
   * bytes held would pass 64 MiB. Leaving the scope (the request ended) leaves the queue. Per
   * process, like the body budget.
   */
  readonly admit: (app: string, expectedBytes: number) => Effect.Effect<void, GatewayError, Scope.Scope>
  /** refuse early when the app already holds its most files */
  readonly checkRoom: (app: string) => Effect.Effect<void, GatewayError>
  readonly stage: (options: StageOptions) => Effect.Effect<Stage, GatewayError>
  /** remove a finished stage that will not be committed */
  readonly drop: (staged: StagedFile) => Effect.Effect<void>
  /** make a staged file visible; 400 `file_limit_exceeded` / `file_storage_full` when it does not fit */
  readonly commit: (app: string, staged: StagedFile, options: CommitOptions) => Effect.Effect<FileRecord, GatewayError>
  /** a live file of this app, or none (unknown, deleted, expired, other app) */
  readonly get: (app: string, id: string) => Effect.Effect<Option.Option<FileRecord>, GatewayError>
  /** the app's live files, oldest first */
  readonly list: (app: string) => Effect.Effect<ReadonlyArray<FileRecord>, GatewayError>
  /** a live file's bytes in order, a piece at a time (a download) */
  readonly content: (record: FileRecord) => Stream.Stream<Uint8Array, GatewayError>
  /** a live file's bytes, for delivery to a model */
  readonly read: (record: FileRecord) => Effect.Effect<Buffer, GatewayError>
  readonly remove: (app: string, id: string) => Effect.Effect<boolean, GatewayError>
  /** files and bytes held per app (status pages) */
  readonly stats: () => Effect.Effect<ReadonlyArray<{ readonly app: string; readonly count: number; readonly bytes: number }>, GatewayError>
  /** unfinished resumable uploads */
  readonly uploads: Uploads
}

/**
 * Uploaded files. On SQLite: metadata rows in `files`, bytes in `<dataDir>/files/<id>` (written
 * to a temporary name, fsynced and renamed before the row commits). On PostgreSQL: the same rows,
 * the bytes as chunks in `file_chunks`, shared by every replica. Either way an acknowledged upload
 * survives a crash and a failed one leaves nothing visible; per app 1000 files and 1 GiB (nothing
 * is ever deleted to make room), saves one at a time with a bounded queue, retention by age.
 */
export class FileStore extends Context.Tag("gateway/FileStore")<FileStore, FileStoreService>() {
  /** the store over the database's backend (`dataDir` holds the bytes on SQLite) */
  static readonly make = (dataDir: string, limits: Partial<FileStoreLimits> = {}) =>
    Effect.flatMap(Backend, (backend): Effect.Effect<FileStoreService, never, SqlClient.SqlClient | Log | Scope.Scope> => {
      const caps = { ...defaultFileStoreLimits, ...limits }
      return backend.kind === "postgres" ? makePgFiles(caps) : makeDiskFiles(dataDir, caps)
    })

  static readonly layer = (dataDir: string, limits?: Partial<FileStoreLimits>) => Layer.scoped(FileStore, FileStore.make(dataDir, limits))
}

