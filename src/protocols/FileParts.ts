import { Effect, Option } from "effect"
import type { UserPart } from "../domain/Canonical.js"
import { Errors, type GatewayError } from "../domain/Errors.js"
import type { Family } from "../http/Envelopes.js"
import { FileStore, kindOf, type FileKind, type FileRecord } from "../services/files/FileStore.js"

/**
 * Stored files named in model requests (spec 4.4: chat `file` parts, Responses `input_file` /
 * `input_image`, Messages `file` sources, Gemini `fileData`): looked up in the caller's app, the
 * per-request bound checked on their sizes before any byte is read (32 files, 50 MB, images and
 * PDFs counted at their base64 size), then read and delivered as model parts (image as a data
 * URL, PDF as a PDF file part, text as a text part).
 */

export const MAX_FILES_PER_REQUEST = 32
export const MAX_FILE_BYTES_PER_REQUEST = 50_000_000

/** A file named in a request, with the field that named it first. */
export interface FileRef {
  readonly id: string
  readonly param: string
}

export interface ResolvedFile {
  readonly record: FileRecord
  readonly kind: FileKind
  readonly part: UserPart
}

export type ResolvedFiles = ReadonlyMap<string, ResolvedFile>

/** `File ... not found` in the family's own words (spec 4.4). */
export const fileNotFound = (family: Family, id: string, param?: string): GatewayError => {
  const options = param !== undefined ? { param } : undefined
  if (family === "messages") return Errors.notFound("not_found_error", `File not found: ${id}`, options)
  if (family === "gemini") return Errors.notFound("not_found", `File ${id.startsWith("file-") ? `files/${id.slice(5)}` : id} was not found`, options)
  return Errors.notFound("invalid_request_error", `No such File object: ${id}`, options)
}

/** The size a file counts for in the per-request bound: base64 for images and PDFs, bytes for text. */
const counted = (record: FileRecord) => (kindOf(record.mimeType) === "text" ? record.bytes : Math.ceil(record.bytes / 3) * 4)

const partOf = (record: FileRecord, bytes: Buffer): UserPart => {
  switch (kindOf(record.mimeType)) {
    case "image":
      return { type: "image", url: `data:${record.mimeType};base64,${bytes.toString("base64")}`, mediaType: record.mimeType }
    case "pdf":
      return { type: "file", mediaType: record.mimeType, data: `data:${record.mimeType};base64,${bytes.toString("base64")}`, filename: record.filename }
    case "text":
      return { type: "text", text: bytes.toString("utf8") }
  }
}

const noFiles: Effect.Effect<ResolvedFiles> = Effect.sync(() => new Map())

/** Resolves the files a request names, for one family's errors. */
export const makeFileResolver = Effect.map(FileStore, (store) => (app: string, refs: ReadonlyArray<FileRef>, family: Family): Effect.Effect<ResolvedFiles, GatewayError> =>
  // most requests name no file: no generator for them
  refs.length === 0 ? noFiles : Effect.gen(function* () {
    const unique = new Map<string, FileRef>()
    for (const ref of refs) if (!unique.has(ref.id)) unique.set(ref.id, ref)
    if (unique.size === 0) return new Map()
    const records: Array<FileRecord> = []
    for (const ref of unique.values()) {
      const found = /^file-[0-9a-f]{32}$/.test(ref.id) ? yield* store.get(app, ref.id) : Option.none<FileRecord>()
      if (Option.isNone(found)) return yield* fileNotFound(family, ref.id, ref.param)
      records.push(found.value)
    }
    const total = records.reduce((sum, r) => sum + counted(r), 0)
    if (records.length > MAX_FILES_PER_REQUEST || total > MAX_FILE_BYTES_PER_REQUEST) {
      return yield* Errors.invalidRequest(
        "files_too_large",
        `A request may name at most ${MAX_FILES_PER_REQUEST} files and 50 MB of them together (images and PDFs counted at their base64 size); this one names ${records.length} files, ${total} bytes`
      )
    }
    const read = yield* Effect.forEach(records, (record) => Effect.map(store.read(record), (bytes) => [record.id, { record, kind: kindOf(record.mimeType), part: partOf(record, bytes) }] as const), {
      concurrency: 4
    })
    return new Map(read)
  })
)
