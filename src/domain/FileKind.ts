/**
 * What a stored file is (spec 2.4): images (PNG, JPEG, GIF, WebP) and PDFs by their first bytes,
 * whatever the name or declared type; text only when declared (`text/*`, `application/json`) or
 * named with a text extension, valid UTF-8 without NUL bytes; JSON must parse. The check runs
 * over the bytes as they stream in, so an upload is never held in memory to be classified.
 */

export const acceptedKinds = "PNG, JPEG, GIF or WebP images, PDF, or UTF-8 text (text/* or JSON)"

/** Longest prefix the magic-byte checks need. */
export const sniffBytes = 12

/** The image or PDF type of a file's first bytes, or undefined. */
export const binaryTypeOf = (head: Uint8Array): string | undefined => {
  const ascii = (from: number, to: number) => String.fromCharCode(...head.subarray(from, to))
  if (head.length >= 8 && head[0] === 0x89 && ascii(1, 4) === "PNG" && head[4] === 0x0d && head[5] === 0x0a && head[6] === 0x1a && head[7] === 0x0a) return "image/png"
  if (head.length >= 3 && head[0] === 0xff && head[1] === 0xd8 && head[2] === 0xff) return "image/jpeg"
  if (head.length >= 6 && (ascii(0, 6) === "GIF87a" || ascii(0, 6) === "GIF89a")) return "image/gif"
  if (head.length >= 12 && ascii(0, 4) === "RIFF" && ascii(8, 12) === "WEBP") return "image/webp"
  if (head.length >= 5 && ascii(0, 5) === "%PDF-") return "application/pdf"
  return undefined
}

const textExtensions: Readonly<Record<string, string>> = {
  txt: "text/plain",
  text: "text/plain",
  md: "text/markdown",
  markdown: "text/markdown",
  csv: "text/csv",
  tsv: "text/tab-separated-values",
  json: "application/json",
  jsonl: "text/plain",
  xml: "text/xml",
  html: "text/html",
  htm: "text/html",
  css: "text/css",
  js: "text/javascript",
  mjs: "text/javascript",
  ts: "text/plain",
  py: "text/x-python",
  java: "text/plain",
  c: "text/plain",
  h: "text/plain",
  cpp: "text/plain",
  go: "text/plain",
  rs: "text/plain",
  rb: "text/plain",
  sh: "text/plain",
  yaml: "text/yaml",
  yml: "text/yaml",
  toml: "text/plain",
  ini: "text/plain",
  log: "text/plain",
  sql: "text/plain",
  tex: "text/plain"
}

/** The text type an upload may be stored as: its declared text type, else its extension's; undefined when neither says text. */
export const textTypeOf = (declaredType: string | undefined, filename: string | undefined): string | undefined => {
  const declared = declaredType?.split(";")[0].trim().toLowerCase()
  if (declared !== undefined && (declared.startsWith("text/") || declared === "application/json")) return declared
  const dot = filename?.lastIndexOf(".") ?? -1
  if (filename === undefined || dot < 0) return undefined
  return textExtensions[filename.slice(dot + 1).toLowerCase()]
}

export type Classification = { readonly _tag: "ok"; readonly mimeType: string; readonly kind: "image" | "pdf" | "text" } | { readonly _tag: "refused"; readonly why: string }

/**
 * An incremental classifier: feed the bytes in order, then `finish`. Images and PDFs are decided
 * by their first bytes; text is checked as it arrives (UTF-8, no NUL) and JSON parsed at the end,
 * so only a JSON text file is ever kept whole (it is at most 4 MiB).
 */
export const makeClassifier = (declaredType: string | undefined, filename: string | undefined) => {
  let head = new Uint8Array(0)
  let decided: "binary" | "text" | undefined
  let binaryType: string | undefined
  const textType = textTypeOf(declaredType, filename)
  const decoder = new TextDecoder("utf-8", { fatal: true })
  let refused: string | undefined
  let total = 0
  let json: Array<string> | undefined = textType === "application/json" ? [] : undefined

  const checkText = (bytes: Uint8Array, last: boolean) => {
    if (refused !== undefined) return
    // the first problem by position gives the reason, so it does not depend on how the bytes were split:
    // decode up to and including the first NUL (valid UTF-8 itself), then refuse the NUL
    const nul = bytes.indexOf(0)
    try {
      const text = decoder.decode(nul >= 0 ? bytes.subarray(0, nul + 1) : bytes, { stream: !last })
      json?.push(text)
    } catch {
      refused = "the text is not valid UTF-8"
      return
    }
    if (nul >= 0) refused = "the text contains a NUL byte"
  }

  const decide = () => {
    binaryType = binaryTypeOf(head)
    decided = binaryType !== undefined ? "binary" : "text"
    if (decided === "text") {
      if (textType === undefined) refused = "the file is neither an image nor a PDF and was not sent as text"
      else checkText(head, false)
    }
  }

  return {
    /** the kind once known: "binary" after the magic bytes matched, "text" otherwise */
    kind: () => decided,
    push: (bytes: Uint8Array) => {
      total += bytes.length
      if (decided === undefined) {
        const joined = new Uint8Array(head.length + bytes.length)
        joined.set(head)
        joined.set(bytes, head.length)
        head = joined
        if (head.length >= sniffBytes) decide()
        return
      }
      if (decided === "text") checkText(bytes, false)
    },
    finish: (): Classification => {
      if (total === 0) return { _tag: "refused", why: "the file is empty" }
      if (decided === undefined) decide()
      if (decided === "binary" && binaryType !== undefined) return { _tag: "ok", mimeType: binaryType, kind: binaryType === "application/pdf" ? "pdf" : "image" }
      checkText(new Uint8Array(0), true)
      if (refused !== undefined) return { _tag: "refused", why: refused }
      if (json !== undefined) {
        try {
          JSON.parse(json.join(""))
        } catch {
          return { _tag: "refused", why: "the JSON does not parse" }
        }
        json = undefined
      }
      return { _tag: "ok", mimeType: textType ?? "text/plain", kind: "text" }
    },
    refused: () => refused
  }
}
