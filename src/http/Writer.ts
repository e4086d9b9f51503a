import { Effect, Stream } from "effect"
import type { ServerResponse } from "node:http"

/**
 * Write a response body stream straight to Node's ServerResponse, with backpressure. Used where
 * the status must be decided only once the first model event exists (streams commit at the first
 * output, spec 6). The stream must not fail: failures after the commit are frames of the protocol.
 */
export const writeStream = (
  res: ServerResponse,
  status: number,
  headers: Readonly<Record<string, string>>,
  body: Stream.Stream<string>
): Effect.Effect<void> =>
  Effect.suspend(() => {
    res.writeHead(status, headers)
    return Stream.runForEachChunk(body, (chunk) => {
      let text = ""
      for (const piece of chunk) text += piece
      // the client is gone: stop pulling, which cancels the upstream request
      if (res.destroyed) return Effect.interrupt
      if (text === "") return Effect.void
      if (res.write(text)) return Effect.void
      return Effect.async<void>((resume) => {
        const done = () => {
          res.off("drain", done)
          res.off("close", done)
          resume(Effect.void)
        }
        res.on("drain", done)
        res.on("close", done)
        return Effect.sync(() => {
          res.off("drain", done)
          res.off("close", done)
        })
      })
    }).pipe(Effect.ensuring(Effect.sync(() => void (res.writableEnded ? undefined : res.end()))))
  })

/** One SSE frame, with an optional event name. */
export const sseFrame = (data: string, event?: string): string => (event === undefined ? `data: ${data}\n\n` : `event: ${event}\ndata: ${data}\n\n`)

/** An SSE comment line, used to keep a connection alive while the model reasons. */
export const sseComment = (text = "keep-alive"): string => `: ${text}\n\n`
