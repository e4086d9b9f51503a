import * as fc from "fast-check"
import { describe, expect, it } from "vitest"
import { parseSseText, SseDecoder, type SseFrame } from "../../src/providers/Sse.js"

/** One block of an event stream as a writer would emit it. */
interface Block {
  readonly comments: ReadonlyArray<string>
  readonly event?: string
  readonly ids: ReadonlyArray<string>
  readonly data: ReadonlyArray<string>
}

/** Field values: no line breaks; colons, leading spaces, JSON and astral characters welcome. */
const value = fc.string({
  unit: fc.oneof(
    { weight: 3, arbitrary: fc.string({ unit: "grapheme", minLength: 1, maxLength: 1 }).filter((c) => !/[\r\n]/.test(c)) },
    { weight: 2, arbitrary: fc.constantFrom(":", " ", "{", "\"", "é", "😀", "data: ") }
  ),
  maxLength: 12
})

const block: fc.Arbitrary<Block> = fc.record(
  {
    comments: fc.array(value, { maxLength: 2 }),
    event: fc.string({ unit: fc.constantFrom("a", "b", "_", ".", "😀"), minLength: 1, maxLength: 6 }),
    ids: fc.array(fc.string({ unit: fc.constantFrom("1", "x"), maxLength: 3 }), { maxLength: 1 }),
    data: fc.array(value, { maxLength: 3 })
  },
  { requiredKeys: ["comments", "ids", "data"] }
)

const eol = fc.constantFrom("\n", "\r\n")

/** Serialize blocks, each line ending in its own line break (LF or CRLF). */
const document = fc.array(fc.tuple(block, fc.array(eol, { minLength: 8, maxLength: 8 })), { maxLength: 6 }).map((blocks) => {
  let text = ""
  const expected: Array<SseFrame> = []
  for (const [b, eols] of blocks) {
    let i = 0
    const line = (l: string) => (text += l + eols[i++ % eols.length])
    for (const c of b.comments) line(`:${c}`)
    if (b.event !== undefined) line(`event: ${b.event}`)
    for (const id of b.ids) line(`id: ${id}`)
    for (const d of b.data) line(`data: ${d}`)
    line("")
    if (b.data.length > 0) expected.push(b.event === undefined ? { data: b.data.join("\n") } : { event: b.event, data: b.data.join("\n") })
  }
  return { text, expected }
})

/** Cut a string at the given positions (any code unit boundary, so inside CRLF and surrogate pairs too). */
const cut = (text: string, cuts: ReadonlyArray<number>): Array<string> => {
  const points = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b)
  const pieces: Array<string> = []
  let at = 0
  for (const p of points) {
    pieces.push(text.slice(at, p))
    at = p
  }
  pieces.push(text.slice(at))
  return pieces
}

const feed = (pieces: ReadonlyArray<string>): Array<SseFrame> => {
  let state: Parameters<typeof parseSseText>[0] = { rest: "", event: undefined, data: [] }
  const frames: Array<SseFrame> = []
  for (const piece of pieces) {
    const [next, out] = parseSseText(state, piece)
    state = next
    frames.push(...out)
  }
  return frames
}

describe("parseSseText", () => {
  it("yields the frames the text was written from, fed whole", () => {
    fc.assert(
      fc.property(document, ({ text, expected }) => {
        expect(feed([text])).toEqual(expected)
      })
    )
  })

  it("yields the same frames however the text is split", () => {
    fc.assert(
      fc.property(document, fc.array(fc.nat(), { maxLength: 12 }), ({ text, expected }, cuts) => {
        expect(feed(cut(text, cuts))).toEqual(expected)
      }),
      { numRuns: 500 }
    )
  })

  it("yields the same frames fed one code unit at a time", () => {
    fc.assert(
      fc.property(document, ({ text, expected }) => {
        expect(feed(text.split(""))).toEqual(expected)
      })
    )
  })

  it("handles a CRLF split between its two characters", () => {
    expect(feed(["data: a\r", "\n\r", "\n"])).toEqual([{ data: "a" }])
    expect(feed(["event: x\r", "\ndata: 1\r\ndata: 2\r", "\n\r", "\n"])).toEqual([{ event: "x", data: "1\n2" }])
  })

  it("keeps an unfinished frame until its blank line arrives", () => {
    expect(feed(["data: a\n"])).toEqual([])
    expect(feed(["data: a\n", "\n"])).toEqual([{ data: "a" }])
    expect(feed(["data:a\ndata\n\n"])).toEqual([{ data: "a\n" }])
  })
})

describe("SseDecoder", () => {
  it("decodes bytes split anywhere (inside multi-byte characters too) to the same frames", () => {
    const encoder = new TextEncoder()
    fc.assert(
      fc.property(document, fc.array(fc.nat(), { maxLength: 12 }), ({ text, expected }, cuts) => {
        const bytes = encoder.encode(text)
        const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b)
        const pieces: Array<Uint8Array> = []
        let at = 0
        for (const p of points) {
          pieces.push(bytes.slice(at, p))
          at = p
        }
        pieces.push(bytes.slice(at))
        const decoder = new SseDecoder()
        const frames = pieces.flatMap((piece) => decoder.push(Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength)))
        expect([...frames, ...decoder.end()]).toEqual(expected)
      }),
      { numRuns: 200 }
    )
  })
})
