import { Chunk, Stream } from "effect"

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

const initial: ParserState = { rest: "", event: undefined, data: [] }

/** Feed one piece of text to the parser: the frames it completes and the state after it. */
export const parseSseText = (state: ParserState, text: string): readonly [ParserState, Array<SseFrame>] => {
  const frames: Array<SseFrame> = []
  const all = state.rest + text
  let event = state.event
  let data = state.data as Array<string>
  let start = 0
  for (;;) {
    let end = all.indexOf("\n", start)
    if (end < 0) break
    const lineEnd = end > start && all.charCodeAt(end - 1) === 13 ? end - 1 : end
    const line = all.slice(start, lineEnd)
    start = end + 1
    if (line === "") {
      if (data.length > 0) frames.push(event === undefined ? { data: data.join("\n") } : { event, data: data.join("\n") })
      event = undefined
      data = []
      continue
    }
    if (line.charCodeAt(0) === 58) continue // ":" comment
    const colon = line.indexOf(":")
    const field = colon < 0 ? line : line.slice(0, colon)
    let value = colon < 0 ? "" : line.slice(colon + 1)
    if (value.charCodeAt(0) === 32) value = value.slice(1)
    if (field === "data") data = data === state.data ? [...data, value] : (data.push(value), data)
    else if (field === "event") event = value
    end = 0
  }
  return [{ rest: all.slice(start), event, data }, frames]
}

/** Decode a byte stream of `text/event-stream` into frames (comments and retry/id fields dropped). */
export const decodeSse = <E, R>(bytes: Stream.Stream<Uint8Array, E, R>): Stream.Stream<SseFrame, E, R> =>
  bytes.pipe(
    Stream.decodeText(),
    Stream.mapAccum(initial, (state, text) => parseSseText(state, text)),
    Stream.mapChunks((chunks) => Chunk.flatMap(chunks, (frames) => Chunk.unsafeFromArray(frames)))
  )
