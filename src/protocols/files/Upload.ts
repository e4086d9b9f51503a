import busboy from "busboy"
import { Effect, Either, Runtime, type Scope } from "effect"
import type { IncomingMessage } from "node:http"
import type { Readable } from "node:stream"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { MAX_JSON_DEPTH, nestsDeeperThan } from "../../domain/JsonDepth.js"
import type { RequestContext } from "../../http/Route.js"
import type { CommitOptions, FileRecord, FileStore, Stage, StagedFile } from "../../services/files/FileStore.js"

/**
 * Upload bodies, streamed to the file store as they arrive (never held whole in memory): the
 * body's pieces under the read timeouts and the size cap, and `multipart/form-data` through
 * busboy (a well-kept streaming parser) with the `file` part written straight to its stage.
 */

export interface BodyRules {
  readonly maxBytes: number
  readonly idleMs: number
  readonly totalMs: number
}

const bodyTooLarge = (max: number) => Errors.payloadTooLarge("request_body_too_large", `Request body is larger than the limit of ${max} bytes`, { closeConnection: true })

/** The declared Content-Length, refused when malformed or over the cap; undefined when chunked. */
export const declaredLength = (incoming: IncomingMessage, maxBytes: number): Effect.Effect<number | undefined, GatewayError> => {
  const declared = incoming.headers["content-length"]
  if (declared === undefined) return Effect.succeed(undefined)
  const length = Number(declared)
  if (!Number.isSafeInteger(length) || length < 0) return Effect.fail(Errors.invalidRequest("invalid_request", "Content-Length is not a valid length", { closeConnection: true }))
  if (length > maxBytes) return Effect.fail(bodyTooLarge(maxBytes))
  return Effect.succeed(length)
}

/**
 * The request body's pieces as they arrive: fails (throws a GatewayError) when the body stops
 * arriving for `idleMs`, is not complete within `totalMs`, passes `maxBytes`, or the client goes.
 */
export async function* bodyPieces(incoming: IncomingMessage, rules: BodyRules): AsyncGenerator<Buffer> {
  const deadline = Date.now() + rules.totalMs
  let received = 0
  // not destroyed on return: a refusal's answer must still reach a client that is sending, and
  // the edge reads on after it (bounded) before it closes the connection
  const iterator = incoming.iterator({ destroyOnReturn: false }) as AsyncIterator<Buffer>
  try {
    while (true) {
      let timer: NodeJS.Timeout | undefined
      const wait = Math.min(rules.idleMs, Math.max(0, deadline - Date.now()))
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          const whole = Date.now() >= deadline
          reject(
            Errors.requestTimeout("body_read_timeout", whole ? `Request body was not complete within ${rules.totalMs} ms` : `Request body stopped arriving for ${rules.idleMs} ms`, {
              closeConnection: true
            })
          )
        }, wait)
      })
      let next: IteratorResult<Buffer>
      try {
        next = await Promise.race([iterator.next(), timeout])
      } catch (error) {
        if (isGatewayError(error)) throw error
        throw Errors.invalidRequest("client_closed", "The client closed the connection before the body was complete")
      } finally {
        clearTimeout(timer)
      }
      if (next.done) {
        if (!incoming.complete) throw Errors.invalidRequest("client_closed", "The client closed the connection before the body was complete")
        return
      }
      received += next.value.length
      if (received > rules.maxBytes) throw bodyTooLarge(rules.maxBytes)
      yield next.value
    }
  } finally {
    // stop reading what is left (the edge closes the connection on a refusal). Not awaited: after
    // an idle timeout a next() is still pending, and the iterator's return waits for it, that is
    // for a byte that may never come (the 408 would wait for it too)
    void iterator.return?.(undefined).catch(() => undefined)
  }
}

export const isGatewayError = (error: unknown): error is GatewayError => typeof error === "object" && error !== null && (error as { _tag?: unknown })._tag === "GatewayError"

/** The body rules of a request: the app's body cap and the configured read timeouts. */
export const bodyRules = (ctx: RequestContext, limits: { readonly bodyReadTimeoutMs: number; readonly bodyReadMaxMs: number }): BodyRules => ({
  maxBytes: ctx.app.maxBodyBytes,
  idleMs: limits.bodyReadTimeoutMs,
  totalMs: limits.bodyReadMaxMs
})

export interface ReceivedForm {
  readonly staged: StagedFile
  readonly filename: string
  readonly fields: Readonly<Record<string, string>>
}

const noFile = () => Errors.invalidRequest("invalid_request_error", "file: a multipart part named file is required", { param: "file" })

/**
 * A `multipart/form-data` upload: the `file` part streamed into a new stage (cap, type check),
 * the text fields collected. Runs inside the app's save-queue place the caller holds.
 */
export const receiveForm = (store: FileStore["Type"], ctx: RequestContext, rules: BodyRules): Effect.Effect<ReceivedForm, GatewayError, Scope.Scope> =>
  Effect.gen(function* () {
    const contentType = ctx.headers["content-type"] ?? ""
    if (!/^multipart\/form-data\s*;/i.test(contentType)) {
      return yield* Errors.unsupportedMediaType("unsupported_media_type", "An upload must be sent as multipart/form-data with a part named file", {
        param: "file",
        closeConnection: true
      })
    }
    // busboy hands the file part to a callback: its write runs on this request's runtime
    const runtime = yield* Effect.runtime<never>()
    let stage: Stage | undefined
    // the file part's stream and whether the request is over: the part is written by a promise
    // outside this fiber, so when the request ends (client gone, refusal) its stream is destroyed
    // (it would never end: the parser is no longer fed) and a stage that opens late is discarded
    let fileStream: Readable | undefined
    let over = false
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        over = true
        fileStream?.destroy()
        return stage === undefined ? Effect.void : stage.discard
      })
    )
    const result = yield* Effect.tryPromise({
      try: (signal) =>
        new Promise<{ readonly filename: string; readonly fields: Record<string, string> }>((resolve, reject) => {
          const fields: Record<string, string> = {}
          let filename: string | undefined
          let writing: Promise<void> | undefined
          let failed = false
          const fail = (error: unknown) => {
            if (failed) return
            failed = true
            reject(error)
          }
          let parser: busboy.Busboy
          try {
            parser = busboy({ headers: ctx.incoming.headers, defParamCharset: "utf8", limits: { files: 1, fields: 32, fieldSize: 64 * 1024, parts: 64 } })
          } catch {
            return fail(Errors.invalidRequest("invalid_request_error", "The multipart body has no boundary", { param: "file", closeConnection: true }))
          }
          parser.on("field", (name, value) => {
            fields[name] = value
          })
          parser.on("file", (name, stream, info) => {
            // a form cut short destroys the part's stream with the parser's error: that error is
            // reported by the parser's own "error" below, and must not escape as an uncaught one
            // from a stream nobody listens to (a skipped part, or one already written)
            stream.on("error", () => {})
            if (name !== "file" || writing !== undefined) {
              stream.resume()
              return
            }
            filename = info.filename ?? "file"
            fileStream = stream
            // runPromise would reject with a FiberFailure wrapping the GatewayError (a 413 or a
            // refused kind would become a 500): take the failure itself
            writing = Runtime.runPromise(runtime)(
              Effect.either(
                Effect.flatMap(store.stage({ filename, declaredType: info.mimeType, maxBytes: rules.maxBytes }), (s) => {
                  if (over) return Effect.zipRight(s.discard, Effect.fail(Errors.invalidRequest("client_closed", "The request ended before the file was written")))
                  stage = s
                  return s.write(stream)
                })
              )
            ).then(
              (written) => {
                if (Either.isRight(written)) return
                stream.resume()
                fail(written.left)
              },
              (error: unknown) => {
                stream.resume()
                fail(error)
              }
            )
          })
          parser.on("error", () => fail(Errors.invalidRequest("invalid_request_error", "The multipart body is malformed", { param: "file", closeConnection: true })))
          parser.on("close", () => {
            if (writing === undefined) return fail(noFile())
            void writing.then(() => (filename === undefined ? fail(noFile()) : failed ? undefined : resolve({ filename, fields })))
          })
          // feed the parser from the guarded body, with backpressure
          void (async () => {
            try {
              for await (const piece of bodyPieces(ctx.incoming, rules)) {
                if (failed || signal.aborted) return
                if (!parser.write(piece)) await new Promise<void>((r) => parser.once("drain", () => r()))
              }
              parser.end()
            } catch (error) {
              fail(error)
            }
          })()
        }),
      catch: (error) => (isGatewayError(error) ? error : Errors.internal("file_store_failed", "The upload could not be read"))
    })
    if (stage === undefined) return yield* noFile()
    const staged = yield* stage.finish
    stage = undefined
    return { staged, filename: result.filename, fields: result.fields }
  })

/** Reads a multipart body piece by piece: delimiters, part headers, and part bodies streamed. */
class PartReader {
  private buffer: Buffer = Buffer.alloc(0)
  private done = false
  constructor(
    private readonly pieces: AsyncIterator<Buffer>,
    private readonly delimiter: Buffer
  ) {}

  private async fill(): Promise<boolean> {
    if (this.done) return false
    const next = await this.pieces.next()
    if (next.done) {
      this.done = true
      return false
    }
    this.buffer = this.buffer.length === 0 ? next.value : Buffer.concat([this.buffer, next.value])
    return true
  }

  /** Everything up to `marker` (consumed), at most `max` bytes. */
  async until(marker: Buffer, max: number): Promise<Buffer> {
    for (;;) {
      const at = this.buffer.indexOf(marker)
      if (at >= 0) {
        const head = this.buffer.subarray(0, at)
        this.buffer = this.buffer.subarray(at + marker.length)
        return head
      }
      if (this.buffer.length > max + marker.length) throw malformed("a part is longer than allowed")
      if (!(await this.fill())) throw malformed("the body ended inside a part")
    }
  }

  /** The current part's body up to the next delimiter, as it arrives (the delimiter is consumed). */
  async *body(): AsyncGenerator<Buffer> {
    const marker = this.delimiter
    for (;;) {
      const at = this.buffer.indexOf(marker)
      if (at >= 0) {
        if (at > 0) yield this.buffer.subarray(0, at)
        this.buffer = this.buffer.subarray(at + marker.length)
        return
      }
      // keep what could be the start of the delimiter
      const safe = this.buffer.length - (marker.length - 1)
      if (safe > 0) {
        yield this.buffer.subarray(0, safe)
        this.buffer = this.buffer.subarray(safe)
      }
      if (!(await this.fill())) throw malformed("the body ended inside the file part")
    }
  }

  /** After a delimiter: true when another part follows, false at the closing `--`. */
  async next(): Promise<boolean> {
    while (this.buffer.length < 2) if (!(await this.fill())) throw malformed("the body ended after a delimiter")
    const tail = this.buffer.subarray(0, 2).toString("latin1")
    this.buffer = this.buffer.subarray(2)
    if (tail === "--") return false
    if (tail !== "\r\n") throw malformed("a delimiter is not followed by a line break")
    return true
  }
}

const malformed = (why: string) => Errors.invalidRequest("invalid_argument", `The multipart/related body is malformed: ${why}`, { closeConnection: true })

const partHeaders = (raw: Buffer): Record<string, string> => {
  const headers: Record<string, string> = {}
  for (const line of raw.toString("latin1").split("\r\n")) {
    const colon = line.indexOf(":")
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
  }
  return headers
}

export interface ReceivedRelated {
  readonly staged: StagedFile
  readonly metadata: unknown
}

/**
 * A Gemini-style `uploadType=multipart` body (multipart/related): a JSON metadata part, then the
 * file part, streamed into a new stage.
 */
export const receiveRelated = (store: FileStore["Type"], ctx: RequestContext, rules: BodyRules): Effect.Effect<ReceivedRelated, GatewayError, Scope.Scope> =>
  Effect.gen(function* () {
    const contentType = ctx.headers["content-type"] ?? ""
    const boundary = /^multipart\/related\s*;.*boundary="?([^";]+)"?/i.exec(contentType)?.[1]
    if (boundary === undefined) {
      return yield* Errors.unsupportedMediaType("unsupported_media_type", "uploadType=multipart takes a multipart/related body with a boundary", { closeConnection: true })
    }
    let stage: Stage | undefined
    yield* Effect.addFinalizer(() => (stage === undefined ? Effect.void : stage.discard))
    const pieces = bodyPieces(ctx.incoming, rules)
    const reader = new PartReader(pieces, Buffer.from(`\r\n--${boundary}`, "latin1"))
    const read = <A>(f: () => Promise<A>) => Effect.tryPromise({ try: f, catch: (error) => (isGatewayError(error) ? error : malformed("unreadable")) })
    // preamble up to the first delimiter (which may start the body without a line break)
    yield* read(async () => {
      const first = await reader.until(Buffer.from(`--${boundary}`, "latin1"), 64 * 1024)
      if (first.length > 0 && !first.toString("latin1").endsWith("\r\n") && first.toString("latin1").trim() !== "") throw malformed("text before the first part")
      if (!(await reader.next())) throw malformed("no parts")
    })
    const metaHeaders = partHeaders(yield* read(() => reader.until(Buffer.from("\r\n\r\n"), 16 * 1024)))
    const metaBytes = yield* read(() => reader.until(Buffer.from(`\r\n--${boundary}`, "latin1"), 64 * 1024))
    if (!(metaHeaders["content-type"] ?? "application/json").toLowerCase().startsWith("application/json")) throw malformed("the first part must be the JSON metadata")
    let metadata: unknown
    try {
      metadata = metaBytes.length === 0 ? {} : JSON.parse(metaBytes.toString("utf8"))
    } catch {
      return yield* malformed("the metadata part is not JSON")
    }
    if (nestsDeeperThan(metadata)) return yield* malformed(`the metadata part nests deeper than ${MAX_JSON_DEPTH} levels`)
    if (!(yield* read(() => reader.next()))) return yield* Errors.invalidRequest("invalid_argument", "file: the multipart body has no file part", { param: "file" })
    const fileHeaders = partHeaders(yield* read(() => reader.until(Buffer.from("\r\n\r\n"), 16 * 1024)))
    const declared = fileHeaders["content-type"] ?? (metadata as { file?: { mimeType?: string } } | null)?.file?.mimeType
    const name = (metadata as { file?: { displayName?: string } } | null)?.file?.displayName ?? "upload"
    // opened and recorded in one step: a request ended while the file opens still discards it
    const opened = yield* store.stage({ filename: name, ...(declared !== undefined ? { declaredType: declared } : {}), maxBytes: rules.maxBytes }).pipe(
      Effect.tap((s) => Effect.sync(() => void (stage = s))),
      Effect.uninterruptible
    )
    yield* opened.write(reader.body())
    const staged = yield* opened.finish
    stage = undefined
    return { staged, metadata }
  })

/**
 * A whole upload in one request: the body cap checked on the declared length, room for one more
 * file, a place in the app's save queue for the request's lifetime, the body received by
 * `receive` into a staged file, then committed with what `describe` makes of it. A staged file
 * that is not committed (a refused field, the client gone) is removed at once.
 */
export const saveUpload = <R extends { readonly staged: StagedFile }>(
  store: FileStore["Type"],
  ctx: RequestContext,
  rules: BodyRules,
  receive: (store: FileStore["Type"], ctx: RequestContext, rules: BodyRules) => Effect.Effect<R, GatewayError, Scope.Scope>,
  describe: (received: R) => Effect.Effect<CommitOptions, GatewayError>
): Effect.Effect<FileRecord, GatewayError> =>
  Effect.gen(function* () {
    const app = ctx.principal.app
    const length = yield* declaredLength(ctx.incoming, rules.maxBytes)
    yield* store.checkRoom(app)
    return yield* Effect.scoped(
      Effect.gen(function* () {
        yield* store.admit(app, length ?? rules.maxBytes)
        const received = yield* receive(store, ctx, rules)
        let committed = false
        yield* Effect.addFinalizer(() => (committed ? Effect.void : store.drop(received.staged)))
        const options = yield* describe(received)
        const record = yield* store.commit(app, received.staged, options)
        committed = true
        return record
      })
    )
  })
