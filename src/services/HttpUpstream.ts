import { NodeStream } from "@effect/platform-node"
import { Context, Effect, Layer, Stream } from "effect"
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
  /** the body as it arrives; interrupting the stream aborts the exchange */
  readonly stream: Stream.Stream<Uint8Array, TransportFailure>
}

const ignore = () => {}

const classify = (error: unknown): TransportFailure => {
  const name = error instanceof Error ? error.name : ""
  const code = typeof error === "object" && error !== null && "code" in error ? String((error as { code: unknown }).code) : ""
  if (name === "TimeoutError" || code === "UND_ERR_HEADERS_TIMEOUT" || code === "UND_ERR_BODY_TIMEOUT") return "timeout"
  return code === "UND_ERR_SOCKET" || code === "ECONNRESET" ? "body" : "connection"
}

/**
 * HTTP to providers over one keep-alive undici Agent, released with the Layer. Called directly
 * rather than through @effect/platform's HttpClient, which measured at half the throughput here;
 * the deadline is an AbortSignal timer, so no fiber races per request.
 */
export class HttpUpstream extends Context.Tag("gateway/HttpUpstream")<
  HttpUpstream,
  {
    readonly post: (req: UpstreamRequest) => Effect.Effect<UpstreamResponse, TransportFailure>
  }
>() {
  static readonly layer = Layer.scoped(
    HttpUpstream,
    Effect.gen(function* () {
      const agent = yield* Effect.acquireRelease(
        Effect.sync(() => new Agent({ keepAliveTimeout: 30_000, connections: 512, headersTimeout: 0, bodyTimeout: 0 })),
        (agent) => Effect.promise(() => agent.destroy())
      )
      const post = (req: UpstreamRequest) =>
        Effect.tryPromise({
          try: async (interrupt) => {
            const remaining = Math.max(1, req.deadline - Date.now())
            const signal = AbortSignal.any([interrupt, AbortSignal.timeout(remaining)])
            const response = await request(req.url, { method: "POST", headers: req.headers, body: req.body, dispatcher: agent, signal })
            const body = response.body as unknown as Readable
            // destroying a body we stopped reading (client gone, answer cut short) emits an error
            // after the stream's own listeners are gone: without this one it is an uncaught exception
            body.on("error", ignore)
            const result: UpstreamResponse = {
              status: response.statusCode,
              headers: response.headers,
              text: Effect.tryPromise({
                try: (abort) => {
                  abort.addEventListener("abort", () => body.destroy(), { once: true })
                  return response.body.text()
                },
                catch: classify
              }),
              stream: NodeStream.fromReadable<TransportFailure>(() => body, classify)
            }
            return result
          },
          catch: classify
        })
      return HttpUpstream.of({ post })
    })
  )
}
