import { Chunk, Effect, Option, Stream } from "effect"
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
  Effect.scoped(
    Effect.flatMap(Stream.toPull(body), (pull) => writePulled(res, status, headers, { next: Effect.match(pull, { onSuccess: joined, onFailure: () => undefined }), over: () => false }))
  )

const joined = (chunk: Chunk.Chunk<string>): string => {
  let text = ""
  for (const piece of chunk) text += piece
  return text
}

/** Resumes once the response can take more (or is gone). */
const drained = (res: ServerResponse): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
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

/** A response body written piece by piece: `next` gives each (`undefined` after the last). */
export interface PulledBody {
  readonly next: Effect.Effect<string | undefined>
  /** true once the piece just given is the last one: it goes out with the end of the response */
  readonly over: () => boolean
}

/**
 * Write a response body as `next` gives it, piece by piece, with backpressure. The loop has no
 * stream stages: a streamed answer goes from the provider's pull to the socket through plain
 * functions. A client gone stops the pulling (which cancels the upstream request).
 */
export const writePulled = (res: ServerResponse, status: number, headers: Readonly<Record<string, string>>, body: PulledBody): Effect.Effect<void> =>
  Effect.suspend(() => {
    res.writeHead(status, headers)
    const loop: Effect.Effect<void> = Effect.flatMap(body.next, (text) => {
      if (text === undefined) return Effect.void
      if (res.destroyed) return Effect.interrupt
      // the last piece and the end of the chunked body in one write
      if (body.over()) return Effect.sync(() => void res.end(text))
      if (text === "" || res.write(text)) return loop
      return Effect.zipRight(drained(res), loop)
    })
    return Effect.ensuring(loop, Effect.sync(() => void (res.writableEnded ? undefined : res.end())))
  })

/** How a streamed answer's events become the body: the text before, each chunk's, the text after. */
export interface BodyParts<A, E> {
  /** written with the first events */
  readonly start?: string
  readonly encode: (chunk: Chunk.Chunk<A>) => string
  /** after the last event (it may store the answer first); its failure is written as `error` */
  readonly end: Effect.Effect<string, E>
  /** a failure, written as the body's last frame (the status is already sent) */
  readonly error: (error: E) => string
}

/** The text of a run's events as `writePulled` reads it, one pull at a time. */
export const encodedPull = <A, E>(pull: Effect.Effect<Chunk.Chunk<A>, Option.Option<E>>, parts: BodyParts<A, E>): PulledBody => {
  let state: "start" | "body" | "over" = parts.start === undefined ? "body" : "start"
  const ended = Effect.catchAll(parts.end, (error) => Effect.succeed(parts.error(error)))
  const step = Effect.matchEffect(pull, {
    onSuccess: (chunk) => Effect.succeed(parts.encode(chunk)),
    onFailure: (failure) => {
      state = "over"
      return Option.isNone(failure) ? ended : Effect.succeed(parts.error(failure.value))
    }
  })
  const next = Effect.suspend(() => {
    if (state === "over") return Effect.succeed(undefined)
    if (state === "body") return step
    // the opening goes out with the first events: one write, not two
    state = "body"
    return Effect.map(step, (text) => (parts.start ?? "") + (text ?? ""))
  })
  return { next, over: () => state === "over" }
}

/** One SSE frame, with an optional event name. */
export const sseFrame = (data: string, event?: string): string => (event === undefined ? `data: ${data}\n\n` : `event: ${event}\ndata: ${data}\n\n`)

/** An SSE comment line, used to keep a connection alive while the model reasons. */
export const sseComment = (text = "keep-alive"): string => `: ${text}\n\n`
