/**
 * Raw-HTTP pieces of the upload suites (crash, queue, resumable): request bodies built byte by
 * byte, and requests whose body the test sends piece by piece (or never finishes), so the test
 * controls exactly what the gateway has received when it looks.
 */
import { createHash, randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as http from "node:http"
import * as path from "node:path"

export const MiB = 1024 * 1024
export const KiB = 1024

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export const sha256 = (bytes: Uint8Array): string => createHash("sha256").update(bytes).digest("hex")

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])

/** `size` bytes the gateway stores as image/png (its magic bytes, then random bytes): every call differs. */
export const pngBytes = (size: number): Buffer => {
  const out = randomBytes(Math.max(size, 16))
  PNG_SIGNATURE.copy(out, 0)
  return size < 16 ? out.subarray(0, size) : out
}

/** `size` bytes of UTF-8 text (ASCII letters and newlines). */
export const textBytes = (size: number): Buffer => {
  const out = Buffer.alloc(size)
  const line = "the quick brown fox jumps over the lazy dog 0123456789\n"
  for (let i = 0; i < size; i++) out[i] = line.charCodeAt(i % line.length)
  return out
}

export interface FormFile {
  readonly data: Buffer
  readonly filename?: string
  /** the file part's own Content-Type */
  readonly type?: string
}

export interface MultipartBody {
  readonly contentType: string
  /** everything before the file's bytes (fields, the file part's headers) */
  readonly head: Buffer
  readonly tail: Buffer
  readonly body: Buffer
}

/** A `multipart/form-data` body as the openai SDK builds it: the text fields, then the file part. */
export const formBody = (file: FormFile, fields: Readonly<Record<string, string>> = { purpose: "user_data" }): MultipartBody => {
  const boundary = `----formdata-test-${randomBytes(8).toString("hex")}`
  let head = ""
  for (const [name, value] of Object.entries(fields)) head += `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`
  head += `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${file.filename ?? "upload.png"}"\r\nContent-Type: ${file.type ?? "image/png"}\r\n\r\n`
  const headBytes = Buffer.from(head, "latin1")
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`, "latin1")
  return { contentType: `multipart/form-data; boundary=${boundary}`, head: headBytes, tail, body: Buffer.concat([headBytes, file.data, tail]) }
}

/** A Gemini-style `uploadType=multipart` body: JSON metadata, then the file, as multipart/related. */
export const relatedBody = (metadata: unknown, data: Buffer, type = "image/png", boundary = `related-${randomBytes(8).toString("hex")}`): MultipartBody => {
  const head = Buffer.from(
    `--${boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n${JSON.stringify(metadata)}\r\n--${boundary}\r\nContent-Type: ${type}\r\n\r\n`,
    "latin1"
  )
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`, "latin1")
  return { contentType: `multipart/related; boundary=${boundary}`, head, tail, body: Buffer.concat([head, data, tail]) }
}

export interface Answer {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly body: Buffer
  readonly text: string
  /** ms from the request's start to the whole answer */
  readonly ms: number
}

export const jsonOf = (answer: Answer): Record<string, unknown> => {
  try {
    return JSON.parse(answer.text) as Record<string, unknown>
  } catch {
    throw new Error(`not JSON (${answer.status}): ${answer.text.slice(0, 300)}`)
  }
}

/** The `error.code` (chat-style) of an answer. */
export const codeOf = (answer: Answer): unknown => (jsonOf(answer).error as { code?: unknown } | undefined)?.code

/**
 * A request whose body the test writes itself. `answer` settles with the gateway's answer, or
 * with status 0 and the error text when the connection failed before one arrived (it never rejects).
 */
export interface OpenRequest {
  readonly req: http.ClientRequest
  /** write a piece and wait until it was handed to the socket */
  readonly write: (piece: Buffer) => Promise<void>
  /** write the last piece (or none) and end the body; true once handed to the socket */
  readonly end: (piece?: Buffer) => Promise<void>
  /** every byte of the body was handed over (`end` was called) */
  readonly ended: () => boolean
  /** an answer (or its first byte) arrived */
  readonly answered: () => boolean
  readonly answer: Promise<Answer & { readonly error?: string }>
  /** close the connection at once */
  readonly destroy: () => void
}

export const open = (
  port: number,
  method: string,
  target: string,
  headers: Readonly<Record<string, string | number>>,
  options: { readonly host?: string } = {}
): OpenRequest => {
  const started = Date.now()
  let ended = false
  let answered = false
  const req = http.request({ host: options.host ?? "127.0.0.1", port, method, path: target, headers, agent: false })
  req.setNoDelay(true)
  const answer = new Promise<Answer & { readonly error?: string }>((resolve) => {
    const failed = (error: Error) => resolve({ status: 0, headers: {}, body: Buffer.alloc(0), text: "", ms: Date.now() - started, error: error.message })
    req.on("error", failed)
    req.on("response", (res) => {
      answered = true
      const chunks: Array<Buffer> = []
      res.on("data", (c: Buffer) => chunks.push(c))
      res.on("end", () => {
        const body = Buffer.concat(chunks)
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body, text: body.toString("utf8"), ms: Date.now() - started })
      })
      res.on("error", failed)
      res.on("aborted", () => failed(new Error("response aborted")))
    })
  })
  const write = (piece: Buffer) =>
    new Promise<void>((resolve) => {
      if (req.destroyed) return resolve()
      req.write(piece, () => resolve())
    })
  const end = (piece?: Buffer) =>
    new Promise<void>((resolve) => {
      ended = true
      if (req.destroyed) return resolve()
      req.end(piece ?? Buffer.alloc(0), () => resolve())
    })
  req.flushHeaders()
  return { req, write, end, ended: () => ended, answered: () => answered, answer, destroy: () => req.destroy() }
}

/** One whole request; the answer (status 0 with `error` when the connection failed). */
export const call = async (
  port: number,
  method: string,
  target: string,
  headers: Readonly<Record<string, string | number>> = {},
  body?: Buffer | string,
  options: { readonly host?: string } = {}
): Promise<Answer & { readonly error?: string }> => {
  const bytes = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(body, "utf8")
  const request = open(port, method, target, { ...headers, ...(bytes !== undefined ? { "content-length": bytes.length } : {}) }, options)
  void request.end(bytes)
  return request.answer
}

/** POST /v1/files with a whole multipart body. */
export const uploadForm = (port: number, key: string, file: FormFile, fields?: Readonly<Record<string, string>>) => {
  const form = formBody(file, fields)
  return call(port, "POST", "/v1/files", { authorization: `Bearer ${key}`, "content-type": form.contentType }, form.body)
}

/** Names in `<dataDir>/files` ending in `.tmp`. */
export const tempFiles = (dataDir: string): Array<string> => {
  const dir = path.join(dataDir, "files")
  if (!fs.existsSync(dir)) return []
  return fs.readdirSync(dir).filter((name) => name.endsWith(".tmp"))
}

/** Every name in `<dataDir>/files`. */
export const storedNames = (dataDir: string): Array<string> => {
  const dir = path.join(dataDir, "files")
  return fs.existsSync(dir) ? fs.readdirSync(dir).sort() : []
}

/** Poll until `check` holds (or throw after `ms`, naming `what`). */
export const until = async (what: string, check: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> => {
  const deadline = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for: ${what}`)
    await sleep(10)
  }
}

/** Settle `promise` within `ms`, or throw naming `what`. */
export const within = <A>(ms: number, what: string, promise: Promise<A>): Promise<A> =>
  new Promise<A>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms)
    promise.then(
      (a) => {
        clearTimeout(timer)
        resolve(a)
      },
      (e: unknown) => {
        clearTimeout(timer)
        reject(e)
      }
    )
  })
