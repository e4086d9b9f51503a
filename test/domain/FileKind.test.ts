import * as fc from "fast-check"
import { describe, expect, it } from "vitest"
import { acceptedKinds, binaryTypeOf, type Classification, makeClassifier, textTypeOf } from "../../src/domain/FileKind.js"

const bytesOf = (...parts: ReadonlyArray<string | ReadonlyArray<number> | Uint8Array>): Uint8Array =>
  Uint8Array.from(parts.flatMap((part) => (typeof part === "string" ? [...Buffer.from(part, "utf8")] : [...part])))

/** Feed `bytes` split at `cuts` (sorted, deduplicated offsets inside the array), then finish. */
const classify = (bytes: Uint8Array, declaredType: string | undefined, filename: string | undefined, cuts: ReadonlyArray<number> = []): Classification => {
  const classifier = makeClassifier(declaredType, filename)
  let from = 0
  for (const cut of [...cuts, bytes.length]) {
    classifier.push(bytes.subarray(from, cut))
    from = cut
  }
  return classifier.finish()
}

const png = bytesOf([0x89], "PNG", [0x0d, 0x0a, 0x1a, 0x0a], [0, 0, 0, 13], "IHDR", [0, 0, 0, 1])
const jpeg = bytesOf([0xff, 0xd8, 0xff, 0xe0, 0, 16], "JFIF", [0, 1, 1, 0])
const gif87 = bytesOf("GIF87a", [1, 0, 1, 0, 0, 0, 0])
const gif89 = bytesOf("GIF89a", [1, 0, 1, 0, 0, 0, 0])
const webp = bytesOf("RIFF", [36, 0, 0, 0], "WEBPVP8 ", [0, 0, 0, 0])
const pdf = bytesOf("%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n")

const ok = (mimeType: string, kind: "image" | "pdf" | "text"): Classification => ({ _tag: "ok", mimeType, kind })
const refused = (pattern: RegExp) => ({ _tag: "refused", why: expect.stringMatching(pattern) })

describe("FileKind", () => {
  const cases: ReadonlyArray<{
    readonly name: string
    readonly bytes: Uint8Array
    readonly declaredType?: string
    readonly filename?: string
    readonly expected: Classification | ReturnType<typeof refused>
  }> = [
    { name: "a PNG named a.txt and declared text/plain is image/png", bytes: png, declaredType: "text/plain", filename: "a.txt", expected: ok("image/png", "image") },
    { name: "a JPEG with no name or type", bytes: jpeg, expected: ok("image/jpeg", "image") },
    { name: "a GIF87a declared application/json", bytes: gif87, declaredType: "application/json", filename: "x.json", expected: ok("image/gif", "image") },
    { name: "a GIF89a", bytes: gif89, filename: "anim.bin", expected: ok("image/gif", "image") },
    { name: "a WebP", bytes: webp, declaredType: "application/octet-stream", expected: ok("image/webp", "image") },
    { name: "a PDF (with non-UTF-8 bytes) named .md", bytes: pdf, filename: "doc.md", expected: ok("application/pdf", "pdf") },
    { name: "a 5-byte PDF header alone is a PDF", bytes: bytesOf("%PDF-"), expected: ok("application/pdf", "pdf") },
    { name: "RIFF that is not WEBP is not an image", bytes: bytesOf("RIFF", [36, 0, 0, 0], "WAVEfmt "), expected: refused(/neither an image nor a PDF/) },
    { name: "a .txt with invalid UTF-8", bytes: bytesOf("hello ", [0xc3, 0x28], " world"), filename: "a.txt", expected: refused(/not valid UTF-8/) },
    { name: "a .txt ending in a truncated UTF-8 sequence", bytes: bytesOf("caf\u00e9 au lait ", [0xe2, 0x82]), filename: "a.txt", expected: refused(/not valid UTF-8/) },
    { name: "a .txt with UTF-16 surrogate encoded in UTF-8", bytes: bytesOf("abc", [0xed, 0xa0, 0x80]), filename: "a.txt", expected: refused(/not valid UTF-8/) },
    { name: "text with a NUL byte", bytes: bytesOf("hello\u0000world, more text"), declaredType: "text/plain", expected: refused(/NUL/) },
    { name: "a NUL before invalid UTF-8: the NUL is named", bytes: bytesOf("some text first ", [0], " then ", [0xff]), filename: "a.txt", expected: refused(/NUL/) },
    { name: "invalid UTF-8 before a NUL: the UTF-8 is named", bytes: bytesOf("some text first ", [0xff], " then ", [0]), filename: "a.txt", expected: refused(/not valid UTF-8/) },
    { name: "a sequence cut short by a NUL is invalid UTF-8", bytes: bytesOf("some text first ", [0xe2, 0], " then"), filename: "a.txt", expected: refused(/not valid UTF-8/) },
    { name: "a short text with a NUL byte", bytes: bytesOf("a\u0000b"), filename: "a.txt", expected: refused(/NUL/) },
    { name: "JSON that does not parse", bytes: bytesOf('{"a": 1,,}'), declaredType: "application/json", expected: refused(/JSON does not parse/) },
    { name: "JSON (by extension) that does not parse", bytes: bytesOf("{not json at all}"), filename: "data.JSON", expected: refused(/JSON does not parse/) },
    { name: "JSON that parses", bytes: bytesOf('{"name": "caf\u00e9", "n": [1, 2, 3]}'), declaredType: "application/json", expected: ok("application/json", "text") },
    { name: "JSON with parameters in its declared type", bytes: bytesOf("[1, 2]"), declaredType: "Application/JSON; charset=utf-8", expected: ok("application/json", "text") },
    { name: "unknown binary without a text declaration", bytes: bytesOf([0x7f], "ELF", [2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]), filename: "a.out", expected: refused(/neither an image nor a PDF/) },
    { name: "plain UTF-8 text without any text declaration", bytes: bytesOf("just some words here"), declaredType: "application/octet-stream", filename: "notes", expected: refused(/not sent as text/) },
    { name: "text with a .md extension and no declared type", bytes: bytesOf("# Title\n\nSome *markdown* \u2014 \u{1F600}\n"), filename: "README.md", expected: ok("text/markdown", "text") },
    { name: "a text extension is enough when the declared type is not text", bytes: bytesOf("a,b\n1,2\n"), declaredType: "application/octet-stream", filename: "t.csv", expected: ok("text/csv", "text") },
    { name: "declared text/csv; charset=utf-8", bytes: bytesOf("a,b,c\n1,2,3\n"), declaredType: "text/csv; charset=utf-8", filename: "upload", expected: ok("text/csv", "text") },
    { name: "a declared text type wins over the extension", bytes: bytesOf("<p>hi</p> and more"), declaredType: "text/html", filename: "a.json", expected: ok("text/html", "text") },
    { name: "a 5-byte text", bytes: bytesOf("hello"), declaredType: "text/plain", expected: ok("text/plain", "text") },
    { name: "a 1-byte text", bytes: bytesOf("x"), filename: "x.txt", expected: ok("text/plain", "text") },
    { name: "an empty file", bytes: new Uint8Array(0), declaredType: "text/plain", filename: "empty.txt", expected: refused(/empty/) },
    { name: "an empty file with no type", bytes: new Uint8Array(0), expected: refused(/empty/) }
  ]

  describe.each(cases)("$name", ({ bytes, declaredType, expected, filename }) => {
    it("whole", () => {
      expect(classify(bytes, declaredType, filename)).toEqual(expected)
    })
    it("byte by byte", () => {
      const cuts = Array.from({ length: Math.max(0, bytes.length - 1) }, (_, i) => i + 1)
      expect(classify(bytes, declaredType, filename, cuts)).toEqual(expected)
    })
  })

  it("reports the kind once the first bytes are in, and a refusal of undeclared bytes as soon as it is known", () => {
    const image = makeClassifier(undefined, undefined)
    image.push(png.subarray(0, 4))
    expect(image.kind()).toBeUndefined()
    image.push(png.subarray(4))
    expect(image.kind()).toBe("binary")
    expect(image.refused()).toBeUndefined()

    const text = makeClassifier("text/plain", undefined)
    text.push(bytesOf("twelve bytes!"))
    expect(text.kind()).toBe("text")
    text.push(bytesOf([0xff]))
    expect(text.refused()).toMatch(/not valid UTF-8/)

    const binary = makeClassifier(undefined, "blob.bin")
    binary.push(new Uint8Array(64).fill(1))
    expect(binary.refused()).toMatch(/not sent as text/)
  })

  it("textTypeOf: declared text types, then the extension", () => {
    expect(textTypeOf("text/csv; charset=utf-8", undefined)).toBe("text/csv")
    expect(textTypeOf(" TEXT/Plain ", "x.bin")).toBe("text/plain")
    expect(textTypeOf("application/json", undefined)).toBe("application/json")
    expect(textTypeOf("application/pdf", "a.md")).toBe("text/markdown")
    expect(textTypeOf(undefined, "archive.tar.gz")).toBeUndefined()
    expect(textTypeOf(undefined, "Makefile")).toBeUndefined()
    expect(textTypeOf(undefined, undefined)).toBeUndefined()
    expect(textTypeOf("image/png", "photo.png")).toBeUndefined()
  })

  it("binaryTypeOf needs the whole magic number", () => {
    expect(binaryTypeOf(png)).toBe("image/png")
    expect(binaryTypeOf(png.subarray(0, 7))).toBeUndefined()
    expect(binaryTypeOf(webp.subarray(0, 11))).toBeUndefined()
    expect(binaryTypeOf(bytesOf("%PDF"))).toBeUndefined()
    expect(binaryTypeOf(new Uint8Array(0))).toBeUndefined()
  })

  it("the accepted kinds are named for refusals", () => {
    expect(acceptedKinds).toMatch(/PNG.*JPEG.*GIF.*WebP.*PDF.*UTF-8 text/)
  })

  describe("property: chunk splits never change the result", () => {
    /** Bytes that exercise every path: magic numbers, multi-byte UTF-8, NUL, invalid bytes, JSON. */
    const utf8Text = fc.string({ unit: "grapheme", maxLength: 40 }).map((s) => bytesOf(s))
    const prefix = fc.constantFrom(png, jpeg, gif89, webp, bytesOf("%PDF-"), new Uint8Array(0))
    const json = fc.jsonValue({ maxDepth: 3 }).map((value) => bytesOf(JSON.stringify(value)))
    const bytes = fc.oneof(
      utf8Text,
      json,
      fc.tuple(prefix, fc.uint8Array({ maxLength: 40 })).map(([p, rest]) => bytesOf(p, rest)),
      fc.tuple(utf8Text, fc.constantFrom([0], [0xff], [0xc3], [0xe2, 0x82], [0xf0, 0x9f, 0x98], [0xed, 0xa0, 0x80], [0xc0, 0xaf]), utf8Text).map(([a, bad, b]) => bytesOf(a, bad, b)),
      fc.tuple(utf8Text, fc.constantFrom([0], [0xff]), utf8Text, fc.constantFrom([0], [0xfe]), utf8Text).map(([a, x, b, y, c]) => bytesOf(a, x, b, y, c)),
      fc.uint8Array({ maxLength: 64 })
    )
    const declared = fc.constantFrom(undefined, "text/plain", "application/json", "text/csv; charset=utf-8", "application/octet-stream", "image/png")
    const filename = fc.constantFrom(undefined, "a.txt", "a.json", "a.md", "blob", "a.bin")
    const withCuts = bytes.chain((b) =>
      fc.tuple(
        fc.constant(b),
        fc.uniqueArray(fc.integer({ min: 0, max: b.length }), { maxLength: Math.min(b.length + 1, 12) }).map((cuts) => [...cuts].sort((x, y) => x - y))
      )
    )

    it("any bytes, any declaration, any split", () => {
      fc.assert(
        fc.property(withCuts, declared, filename, ([b, cuts], type, name) => {
          expect(classify(b, type, name, cuts)).toEqual(classify(b, type, name))
        }),
        { numRuns: 3000 }
      )
    })

    it("valid UTF-8 text (multi-byte characters cut anywhere) stays valid", () => {
      const text = fc.string({ unit: "grapheme", minLength: 1, maxLength: 80 }).filter((s) => !s.includes("\u0000"))
      fc.assert(
        fc.property(
          text.chain((s) => {
            const b = bytesOf(s)
            return fc.tuple(fc.constant(b), fc.uniqueArray(fc.integer({ min: 1, max: Math.max(1, b.length - 1) }), { maxLength: 16 }))
          }),
          ([b, cuts]) => {
            const sorted = cuts.filter((cut) => cut < b.length).sort((x, y) => x - y)
            const whole = classify(b, "text/plain", undefined)
            const split = classify(b, "text/plain", undefined, sorted)
            expect(split).toEqual(whole)
            // a file starting with a magic number is an image or PDF; anything else is valid text
            if (binaryTypeOf(b.subarray(0, 12)) === undefined) expect(whole).toEqual(ok("text/plain", "text"))
          }
        ),
        { numRuns: 2000 }
      )
    })
  })
})
