import { Context, Effect, Layer } from "effect"
import type { Readable } from "node:stream"
import { Agent, request } from "undici"

/** Why an upstream exchange failed before an HTTP answer could be read. */
export type TransportFailure = "timeout" | "connection" | "body"

export interface UpstreamRequest {
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  /** epoch ms by which the whole exchange, body included, must be done */
  readonly deadline: number
}

export interface UpstreamResponse {
  readonly status: number
  readonly headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>>
  /** the whole body as text */
  readonly text: Effect.Effect<string, TransportFailure>
  /**
   * The body as it arrives: each read gives every piece buffered by then (waiting for one when none
   * is), `undefined` at the end. One read per network read, not per piece, and no stream machinery:
   * streaming answers pass through here once per few kilobytes.
   */
  readonly read: Effect.Effect<ReadonlyArray<Buffer> | undefined, TransportFailure>
  /** stop reading: aborts the exchange unless the body was read to its end */
  readonly close: () => void
  /**
   * the answer is complete, the rest of the body is not needed: it is read and dropped, so the
   * connection goes back to the pool (aborting would cost a new connection for the next call)
   */
  readonly release: () => void
}

const ignore = () => {}

const classify = (error: unknown): TransportFailure => {
  const name = error instanceof Error ? error.name : ""
  const code = typeof error === "object" && error !== null && "code" in error ? String((error as { code: unknown }).code) : ""
  if (name === "TimeoutError" || code === "UND_ERR_HEADERS_TIMEOUT" || code === "UND_ERR_BODY_TIMEOUT") return "timeout"
  return code === "UND_ERR_SOCKET" || code === "ECONNRESET" ? "body" : "connection"
}

/** A whole answer: its status, headers and body text. */
export interface WholeResponse {
  readonly status: number
  readonly headers: UpstreamResponse["headers"]
  readonly text: string
}

/** Every piece a paused Readable has buffered, waiting for the next when there is none. */
const readPieces = (body: Readable): Effect.Effect<ReadonlyArray<Buffer> | undefined, TransportFailure> =>
  Effect.async<ReadonlyArray<Buffer> | undefined, TransportFailure>((resume) => {
    const take = (): Array<Buffer> => {
      const pieces: Array<Buffer> = []
      let piece: Buffer | null
      while ((piece = body.read() as Buffer | null) !== null) pieces.push(piece)
      return pieces
    }
    if (body.errored !== null) return resume(Effect.fail(classify(body.errored)))
    const now = take()
    if (now.length > 0) return resume(Effect.succeed(now))
    if (body.readableEnded) return resume(Effect.succeed(undefined))
    if (body.destroyed) return resume(Effect.fail("body"))
    const cleanup = () => {
      body.off("readable", onReadable)
      body.off("end", onEnd)
      body.off("error", onError)
      body.off("close", onClose)
    }
    const onReadable = () => {
      const pieces = take()
      if (pieces.length === 0) return
      cleanup()
      resume(Effect.succeed(pieces))
    }
    const onEnd = () => {
      cleanup()
      resume(Effect.succeed(undefined))
    }
    const onError = (error: unknown) => {
      cleanup()
      resume(Effect.fail(classify(error)))
    }
    // closed without an end or an error: the exchange was aborted
    const onClose = () => {
      cleanup()
      resume(body.readableEnded ? Effect.succeed(undefined) : Effect.fail("body"))
    }
    body.on("readable", onReadable)
    body.on("end", onEnd)
    body.on("error", onError)
    body.on("close", onClose)
    return Effect.sync(cleanup)
  })

/**
 * HTTP to providers over one keep-alive undici Agent, released with the Layer. Called directly
 * rather than through @effect/platform's HttpClient, which measured at half the throughput here;
 * the deadline is an AbortSignal timer, so no fiber races per request.
 */
export class HttpUpstream extends Context.Tag("gateway/HttpUpstream")<
  HttpUpstream,
  {
    readonly post: (req: UpstreamRequest) => Effect.Effect<UpstreamResponse, TransportFailure>
    /**
     * The whole answer at once, for a call that reads it whole anyway (a non-streamed answer):
     * one suspension of the calling fiber instead of two. An error status whose body cannot be
     * read comes back with empty text, as its status is the answer.
     */
    readonly postWhole: (req: UpstreamRequest) => Effect.Effect<WholeResponse, TransportFailure>
  }
>() {
  /** `connections`: the most open connections per upstream origin */
  static readonly layerWith = (options: { readonly connections: number }) =>
    Layer.scoped(HttpUpstream, makeHttpUpstream(options.connections))

  /** the pool a provider test needs: 512 connections per origin */
  static get layer() {
    return HttpUpstream.layerWith({ connections: 512 })
  }
}

const makeHttpUpstream = (connections: number) =>
  Effect.gen(function* () {
    const agent = yield* Effect.acquireRelease(
      Effect.sync(() => new Agent({ keepAliveTimeout: 30_000, connections, headersTimeout: 0, bodyTimeout: 0 })),
      (agent) => Effect.promise(() => agent.destroy())
    )
    // Effect.async rather than tryPromise: one AbortController per call (tryPromise adds its own
    // per step), and one timer for the deadline, cleared when the exchange is over
    const send = (req: UpstreamRequest) => {
      const controller = new AbortController()
      const timer = setTimeout(() => controller.abort(new DOMException("past the deadline", "TimeoutError")), Math.max(1, req.deadline - Date.now()))
      const answer = request(req.url, { method: "POST", headers: req.headers, body: req.body, dispatcher: agent, signal: controller.signal })
      return { controller, timer, answer }
    }
    const post = (req: UpstreamRequest) =>
      Effect.async<UpstreamResponse, TransportFailure>((resume) => {
        const { controller, timer, answer } = send(req)
        answer.then(
          (response) => {
            const body = response.body as unknown as Readable
            body.once("close", () => clearTimeout(timer))
            // destroying a body we stopped reading (client gone, answer cut short) emits an error
            // after the stream's own listeners are gone: without this one it is an uncaught exception
            body.on("error", ignore)
            resume(
              Effect.succeed({
                status: response.statusCode,
                headers: response.headers,
                text: Effect.async<string, TransportFailure>((done) => {
                  response.body.text().then(
                    (text) => done(Effect.succeed(text)),
                    (error: unknown) => done(Effect.fail(classify(error)))
                  )
                  return Effect.sync(() => body.destroy())
                }),
                read: readPieces(body),
                close: () => {
                  if (!body.readableEnded) body.destroy()
                },
                release: () => {
                  if (!body.readableEnded) body.resume()
                }
              })
            )
          },
          (error: unknown) => {
            clearTimeout(timer)
            resume(Effect.fail(classify(error)))
          }
        )
        // interrupted before the answer's head arrived: abort the exchange
        return Effect.sync(() => controller.abort())
      })
    const postWhole = (req: UpstreamRequest) =>
      Effect.async<WholeResponse, TransportFailure>((resume) => {
        const { controller, timer, answer } = send(req)
        answer
          .then((response) => {
            const ok = response.statusCode >= 200 && response.statusCode < 300
            return response.body.text().then(
              (text): WholeResponse => ({ status: response.statusCode, headers: response.headers, text }),
              (error: unknown): WholeResponse => {
                if (ok) throw error
                return { status: response.statusCode, headers: response.headers, text: "" }
              }
            )
          })
          .then(
            (whole) => {
              clearTimeout(timer)
              resume(Effect.succeed(whole))
            },
            (error: unknown) => {
              clearTimeout(timer)
              resume(Effect.fail(classify(error)))
            }
          )
        // interrupted before the whole answer arrived: abort the exchange
        return Effect.sync(() => {
          clearTimeout(timer)
          controller.abort()
        })
      })
    return HttpUpstream.of({ post, postWhole })
  })
