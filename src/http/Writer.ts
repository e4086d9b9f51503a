import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Chunk, Effect, Option, Stream } from "effect"

/**
 * Streamed answers as the platform's `HttpServerResponse.stream`. The status and headers are
 * decided before the response is made (streams commit at the first output, spec 6); the body
 * stream must not fail: failures after the commit are frames of the protocol.
 */

const encoder = new TextEncoder()

/** A streamed response (the platform writes it with backpressure). */
export const streamResponse = (status: number, headers: Readonly<Record<string, string>>, body: Stream.Stream<Uint8Array>): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.stream(body, { status, headers, contentType: headers["content-type"] })

/** Text pieces as UTF-8 bytes. */
export const utf8 = (text: Stream.Stream<string>): Stream.Stream<Uint8Array> => Stream.map(text, (piece) => encoder.encode(piece))

/** A response body written piece by piece: `next` gives each (`undefined` after the last). */
export interface PulledBody {
  readonly next: Effect.Effect<string | undefined>
}

/**
 * The body as a byte stream with no stages: each pull of the platform's writer is one `next`, so a
 * streamed answer goes from the provider's pull to the socket through plain functions (empty
 * pieces skipped). A client gone interrupts the pulling (which cancels the upstream request).
 */
export const pulledBytes = (body: PulledBody): Stream.Stream<Uint8Array> => {
  const pull: Effect.Effect<Uint8Array, Option.Option<never>> = Effect.flatMap(body.next, (text) =>
    text === undefined ? Effect.fail(Option.none()) : text === "" ? pull : Effect.succeed(encoder.encode(text))
  )
  return Stream.repeatEffectOption(pull)
}

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

/** The text of a run's events as `pulledBytes` reads it, one pull at a time. */
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
  const next = Effect.suspend((): Effect.Effect<string | undefined> => {
    if (state === "over") return Effect.succeed(undefined)
    if (state === "body") return step
    // the opening goes out with the first events: one write, not two
    state = "body"
    return Effect.map(step, (text) => (parts.start ?? "") + text)
  })
  return { next }
}

/** One SSE frame, with an optional event name. */
export const sseFrame = (data: string, event?: string): string => (event === undefined ? `data: ${data}\n\n` : `event: ${event}\ndata: ${data}\n\n`)

/** An SSE comment line, used to keep a connection alive while the model reasons. */
export const sseComment = (text = "keep-alive"): string => `: ${text}\n\n`
