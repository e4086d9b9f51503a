import { Chunk, Effect, Option } from "effect"
import { StringDecoder } from "node:string_decoder"
import type { ModelEvent } from "../domain/Canonical.js"
import { UpstreamError } from "../domain/Errors.js"
import type { TransportFailure, UpstreamResponse } from "./HttpUpstream.js"
import type { AnswerSource } from "./Provider.js"

/** One server-sent event frame. */
export interface SseFrame {
  readonly event?: string
  readonly data: string
}

interface ParserState {
  /** text after the last line break */
  readonly rest: string
  readonly event: string | undefined
  readonly data: ReadonlyArray<string>
}

/**
 * The line parser: whole frames out of text fed piece by piece. Its state is three fields mutated
 * in place (one answer feeds it once per network read: no state object or tuple per read).
 */
class SseParser {
  constructor(
    private rest: string,
    private event: string | undefined,
    private data: Array<string>
  ) {}

  static from(state: ParserState): SseParser {
    return new SseParser(state.rest, state.event, [...state.data])
  }

  get state(): ParserState {
    return { rest: this.rest, event: this.event, data: [...this.data] }
  }

  /** The frames this text completes. */
  feed(text: string): Array<SseFrame> {
    const frames: Array<SseFrame> = []
    const all = this.rest === "" ? text : this.rest + text
    let start = 0
    for (;;) {
      const end = all.indexOf("\n", start)
      if (end < 0) break
      const lineEnd = end > start && all.charCodeAt(end - 1) === 13 ? end - 1 : end
      if (lineEnd === start) {
        // a blank line ends the frame
        const data = this.data
        if (data.length > 0) {
          const joined = data.length === 1 ? data[0] : data.join("\n")
          frames.push(this.event === undefined ? { data: joined } : { event: this.event, data: joined })
          data.length = 0
        }
        this.event = undefined
        start = end + 1
        continue
      }
      if (all.charCodeAt(start) !== 58) this.field(all.slice(start, lineEnd)) // ":" starts a comment
      start = end + 1
    }
    this.rest = start === 0 ? all : all.slice(start)
    return frames
  }

  private field(line: string) {
    const colon = line.indexOf(":")
    const field = colon < 0 ? line : line.slice(0, colon)
    let value = colon < 0 ? "" : line.slice(colon + 1)
    if (value.charCodeAt(0) === 32) value = value.slice(1)
    if (field === "data") this.data.push(value)
    else if (field === "event") this.event = value
  }
}

/** Feed one piece of text to the parser: the frames it completes and the state after it. */
export const parseSseText = (state: ParserState, text: string): readonly [ParserState, Array<SseFrame>] => {
  const parser = SseParser.from(state)
  const frames = parser.feed(text)
  return [parser.state, frames]
}

/** Bytes of `text/event-stream` in, whole frames out, across any split (UTF-8 sequences included). */
export class SseDecoder {
  private readonly text = new StringDecoder("utf8")
  private readonly parser = new SseParser("", undefined, [])
  /** the frames completed by these bytes */
  push(bytes: Uint8Array): Array<SseFrame> {
    return this.parser.feed(this.text.write(bytes as Buffer))
  }
  /** the frames completed by the end of the input (a last frame needs its blank line: none) */
  end(): Array<SseFrame> {
    return this.parser.feed(this.text.end())
  }
}

/** How a provider reads the frames of its event stream. */
export interface FrameReader {
  /** the events of one frame, or the failure it reports */
  readonly frame: (frame: SseFrame) => ReadonlyArray<ModelEvent> | UpstreamError
  /** the answer is complete: stop reading (checked after each frame) */
  readonly done: () => boolean
  /** the events after the last frame, or the failure an incomplete answer is */
  readonly end: () => ReadonlyArray<ModelEvent> | UpstreamError
}

/**
 * A provider's streamed answer as a pull: the first pull sends the request, each later one reads
 * what one network read brought and runs its frames through the reader with plain functions (a
 * Stream stage per step cost more than the parsing). `close` ends the exchange: an answer read to
 * its end (or its terminator) leaves the connection for the next call, anything else aborts it.
 */
export const sseSource = (
  send: Effect.Effect<UpstreamResponse, UpstreamError>,
  transport: (failure: TransportFailure) => UpstreamError,
  reader: FrameReader
): AnswerSource => {
  const decoder = new SseDecoder()
  let response: UpstreamResponse | undefined
  let finished = false
  // a failure after some events of the same read: those go out first, the failure on the next pull
  let failure: UpstreamError | undefined
  const fail = (error: UpstreamError, events: Array<ModelEvent>) => {
    if (events.length === 0) return Effect.fail(Option.some(error))
    finished = true
    failure = error
    return Effect.succeed(Chunk.unsafeFromArray(events))
  }
  const step = (pieces: ReadonlyArray<Buffer> | undefined): Effect.Effect<Chunk.Chunk<ModelEvent>, Option.Option<UpstreamError>> => {
    const events: Array<ModelEvent> = []
    const frames = pieces === undefined ? decoder.end() : pieces.length === 1 ? decoder.push(pieces[0]) : pieces.flatMap((piece) => decoder.push(piece))
    for (const frame of frames) {
      const result = reader.frame(frame)
      if (result instanceof UpstreamError) return fail(result, events)
      for (const event of result) events.push(event)
      if (reader.done()) {
        pieces = undefined
        break
      }
    }
    if (pieces === undefined) {
      finished = true
      const last = reader.end()
      if (last instanceof UpstreamError) return fail(last, events)
      for (const event of last) events.push(event)
    }
    return Effect.succeed(Chunk.unsafeFromArray(events))
  }
  const read = (from: UpstreamResponse) => Effect.flatMap(Effect.mapError(from.read, (failure) => Option.some(transport(failure))), step)
  const opened = Effect.flatMap(Effect.mapError(send, Option.some), (sent) => {
    response = sent
    return read(sent)
  })
  return {
    pull: Effect.suspend(() => {
      if (finished) return Effect.fail(failure === undefined ? Option.none() : Option.some(failure))
      return response === undefined ? opened : read(response)
    }),
    close: Effect.sync(() => {
      if (response === undefined) return
      if (finished && failure === undefined) response.release()
      else response.close()
    })
  }
}
