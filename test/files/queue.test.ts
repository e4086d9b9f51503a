/**
 * The per-app save queue through HTTP (spec 8 "File save queue") and the per-file caps (spec 8
 * "One file"): uploads whose body is held half-sent keep their place (running or waiting), so
 * the test knows exactly who waits when it sends the next one. A gateway runs in this process on
 * a real socket; every held request is closed and the gateway stopped after the suite.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import {
  call,
  codeOf,
  formBody,
  jsonOf,
  KiB,
  MiB,
  open,
  pngBytes,
  sha256,
  sleep,
  tempFiles,
  textBytes,
  until,
  uploadForm,
  within,
  type MultipartBody,
  type OpenRequest
} from "./uploadWire.js"

const KEYS = {
  count: "sk-queue-count-0123456789",
  bytes: "sk-queue-bytes-0123456789",
  chunked: "sk-queue-chunked-0123456789",
  other: "sk-queue-other-0123456789",
  small: "sk-queue-small-0123456789",
  text: "sk-queue-text-0123456789",
  many: "sk-queue-many-0123456789",
  race: "sk-queue-race-0123456789"
} as const

const SMALL_BODY = 64 * KiB

let gw: TestGateway
/** every request a test opened: destroyed after it, so no socket outlives its test */
const opened: Array<OpenRequest> = []

beforeAll(async () => {
  gw = await startGateway({
    providers: { mock: { type: "mock" } },
    keys: Object.entries(KEYS).map(([app, key]) => ({ key, app })),
    limits: { apps: { small: { maxBodyBytes: SMALL_BODY } } }
  })
})

afterEach(async () => {
  for (const request of opened.splice(0)) request.destroy()
  // the gateway notices the closed sockets and leaves the queues
  await sleep(50)
})

afterAll(async () => {
  await gw?.close()
})

/** What a held upload is: its request, its whole body, and the file bytes it will store. */
interface Held {
  readonly request: OpenRequest
  readonly form: MultipartBody
  readonly data: Buffer
  /** bytes of the body sent so far */
  sent: number
  readonly finish: () => Promise<void>
}

/**
 * An upload that sends its headers and the first `sent` bytes of its multipart body (past the
 * file part's headers), then holds. `declared` overrides the Content-Length (the test never
 * finishes such a body); `chunked` sends none.
 */
const hold = async (key: string, size: number, options: { readonly declared?: number; readonly chunked?: boolean } = {}): Promise<Held> => {
  const data = pngBytes(size)
  const form = formBody({ data, filename: "held.png" })
  const length = options.declared ?? form.body.length
  const request = open(gw.port, "POST", "/v1/files", {
    authorization: `Bearer ${key}`,
    "content-type": form.contentType,
    ...(options.chunked === true ? {} : { "content-length": length })
  })
  opened.push(request)
  const first = form.head.length + Math.min(1024, data.length - 1)
  await request.write(form.body.subarray(0, first))
  const held: Held = {
    request,
    form,
    data,
    sent: first,
    finish: async () => {
      await request.end(form.body.subarray(held.sent))
      held.sent = form.body.length
    }
  }
  return held
}

/** The size of a PNG whose multipart body (as `formBody` builds it) is exactly `bodyLength` bytes. */
const sizeForBody = (bodyLength: number) => bodyLength - formBody({ data: Buffer.alloc(0), filename: "held.png" }).body.length

/** Files of an app, chat-style, oldest first. */
const listIds = async (key: string) => {
  const answer = await call(gw.port, "GET", "/v1/files?order=asc", { authorization: `Bearer ${key}` })
  expect(answer.status, answer.text).toBe(200)
  return (jsonOf(answer).data as Array<{ id: string; bytes: number }>)
}

const contentOf = async (key: string, id: string) => {
  const answer = await call(gw.port, "GET", `/v1/files/${id}/content`, { authorization: `Bearer ${key}` })
  expect(answer.status, answer.text).toBe(200)
  return answer.body
}

/** No answer arrives for `ms` (the request is waiting, not refused). */
const stillWaiting = async (requests: ReadonlyArray<OpenRequest>, ms = 250) => {
  await sleep(ms)
  for (const request of requests) expect(request.answered(), "a waiting upload was answered").toBe(false)
}

describe("the per-app save queue", () => {
  it("the 2nd..9th uploads of an app wait, the 10th is 429 file_saves_busy at once; a waiting one that disconnects leaves; another app is not blocked; all others finish 200", async () => {
    const key = KEYS.count
    // the first save runs: its temporary file exists
    const first = await hold(key, 64 * KiB)
    await until("the first upload's temporary file", () => tempFiles(gw.dataDir).length === 1)

    const waiting: Array<Held> = []
    for (let i = 0; i < 8; i++) waiting.push(await hold(key, 16 * KiB + i))
    await stillWaiting([first.request, ...waiting.map((w) => w.request)])
    // waiting saves have not started writing
    expect(tempFiles(gw.dataDir)).toHaveLength(1)

    const started = Date.now()
    const tenth = await uploadForm(gw.port, key, { data: pngBytes(1000) })
    expect(tenth.status, tenth.text).toBe(429)
    expect(codeOf(tenth)).toBe("file_saves_busy")
    expect(tenth.headers["retry-after"]).toBe("1")
    // generous backstop: the held saves never finish on their own, so a queued tenth would never answer
    expect(Date.now() - started).toBeLessThan(10_000)

    // another app saves at once meanwhile
    const otherData = pngBytes(10 * KiB)
    const other = await within(5_000, "another app's upload", uploadForm(gw.port, KEYS.other, { data: otherData }))
    expect(other.status, other.text).toBe(200)

    // a waiting upload whose client goes leaves the queue: a new one takes its place ...
    const gone = waiting.splice(3, 1)[0]
    gone.request.destroy()
    await sleep(300)
    const eleventh = await hold(key, 20 * KiB)
    waiting.push(eleventh)
    await stillWaiting([eleventh.request])
    // ... and the queue is full again
    const twelfth = await uploadForm(gw.port, key, { data: pngBytes(1000) })
    expect(twelfth.status, twelfth.text).toBe(429)
    expect(codeOf(twelfth)).toBe("file_saves_busy")

    // the first finishes, then the waiting ones in turn
    await first.finish()
    const firstAnswer = await within(10_000, "the first upload", first.request.answer)
    expect(firstAnswer.status, firstAnswer.text).toBe(200)
    for (const w of waiting) await w.finish()
    const answers = await within(20_000, "the waiting uploads", Promise.all(waiting.map((w) => w.request.answer)))
    for (const a of answers) expect(a.status, a.text).toBe(200)

    const ids = [firstAnswer, ...answers].map((a) => String(jsonOf(a).id))
    const listed = await listIds(key)
    expect(listed.map((f) => f.id).sort()).toEqual([...ids].sort())
    // the stored bytes are the ones sent
    const sent = new Map([[String(jsonOf(firstAnswer).id), first.data], ...waiting.map((w, i) => [String(jsonOf(answers[i]).id), w.data] as const)])
    for (const [id, data] of sent) expect(sha256(await contentOf(key, id)), id).toBe(sha256(data))
    expect(tempFiles(gw.dataDir)).toEqual([])
  })

  it("waiting uploads whose Content-Length totals pass 64 MiB get 429 at once; exactly 64 MiB waits; a disconnect gives the bytes back", async () => {
    const key = KEYS.bytes
    const first = await hold(key, 1 * MiB)
    await until("the first upload's temporary file", () => tempFiles(gw.dataDir).length === 1)
    const firstLength = first.form.body.length
    const second = await hold(key, sizeForBody(31 * MiB))
    expect(second.form.body.length).toBe(31 * MiB)
    await stillWaiting([second.request], 100)

    const room = 64 * MiB - firstLength - second.form.body.length
    // one byte over: refused at once, before its body is read
    const over = open(gw.port, "POST", "/v1/files", { authorization: `Bearer ${key}`, "content-type": formBody({ data: Buffer.alloc(0) }).contentType, "content-length": room + 1 })
    opened.push(over)
    const overAnswer = await within(2_000, "the over-the-bytes upload's answer", over.answer)
    expect(overAnswer.status, overAnswer.text).toBe(429)
    expect(codeOf(overAnswer)).toBe("file_saves_busy")
    expect(overAnswer.headers["retry-after"]).toBe("1")

    // exactly the room left: waits
    const exact = await hold(key, 1000, { declared: room })
    await stillWaiting([exact.request])
    // it goes: its bytes are given back, another of the same size waits again
    exact.request.destroy()
    await sleep(300)
    const again = await hold(key, 1000, { declared: room })
    await stillWaiting([again.request])

    // the first finishes, then the 31 MiB one
    await first.finish()
    expect((await within(10_000, "the first upload", first.request.answer)).status).toBe(200)
    await second.finish()
    const secondAnswer = await within(20_000, "the 31 MiB upload", second.request.answer)
    expect(secondAnswer.status, secondAnswer.text).toBe(200)
    expect(jsonOf(secondAnswer).bytes).toBe(second.data.length)
    // the held one (never to finish) is running now: it has a temporary file; closing removes it
    await until("the third upload to run", () => tempFiles(gw.dataDir).length === 1)
    again.request.destroy()
    await until("no temporary file after the client left", () => tempFiles(gw.dataDir).length === 0, 5_000)
  })

  it("a chunked upload (no Content-Length) holds the app's body cap (32 MiB) in the queue", async () => {
    const key = KEYS.chunked
    const first = await hold(key, 1000)
    await until("the first upload's temporary file", () => tempFiles(gw.dataDir).length === 1)
    const chunked = await hold(key, 1000, { chunked: true })
    await stillWaiting([chunked.request], 100)
    const room = 64 * MiB - first.form.body.length - 32 * MiB
    const over = open(gw.port, "POST", "/v1/files", { authorization: `Bearer ${key}`, "content-type": formBody({ data: Buffer.alloc(0) }).contentType, "content-length": room + 1 })
    opened.push(over)
    const overAnswer = await within(2_000, "the over-the-bytes upload's answer", over.answer)
    expect(overAnswer.status, overAnswer.text).toBe(429)
    expect(codeOf(overAnswer)).toBe("file_saves_busy")
    const fits = await hold(key, 1000, { declared: room })
    await stillWaiting([fits.request])

    // all three finish in turn (the chunked one with its real body)
    await first.finish()
    await chunked.finish()
    expect((await within(10_000, "first", first.request.answer)).status).toBe(200)
    expect((await within(10_000, "chunked", chunked.request.answer)).status).toBe(200)
    fits.request.destroy()
    await until("no temporary file", () => tempFiles(gw.dataDir).length === 0, 5_000)
    expect((await listIds(key)).length).toBe(2)
  })
})

describe("uploads that end early leave nothing behind", () => {
  it("a waiting upload whose client goes just as its turn comes (its file being opened) leaves no temporary file", async () => {
    const key = KEYS.race
    for (let i = 0; i < 30; i++) {
      const first = await hold(key, 2000)
      // a leaked file of an earlier round would stay beside this one forever
      await until(`round ${i}: the first upload's temporary file, and no other`, () => tempFiles(gw.dataDir).length === 1)
      const second = await hold(key, 2000)
      await sleep(10)
      await first.finish()
      expect((await within(5_000, "the first upload", first.request.answer)).status).toBe(200)
      // the second's turn has just come: close it at slightly different moments
      await sleep(i % 3)
      second.request.destroy()
      // its file may still be opening (no name on disk yet): the gateway removes it once open
      await until("no temporary file", () => tempFiles(gw.dataDir).length === 0, 5_000).catch(() => undefined)
    }
    // whatever was opened late is gone by now; a leak stays
    await until("no temporary file after the last round", () => tempFiles(gw.dataDir).length === 0, 10_000).catch(() => undefined)
    expect(tempFiles(gw.dataDir)).toEqual([])
  }, 60_000)
})

describe("per-file caps", () => {
  it("a body over the app's limits.apps.<name>.maxBodyBytes is 413 before it is read", async () => {
    const form = formBody({ data: pngBytes(SMALL_BODY) })
    const request = open(gw.port, "POST", "/v1/files", { authorization: `Bearer ${KEYS.small}`, "content-type": form.contentType, "content-length": form.body.length })
    opened.push(request)
    // only the headers were sent
    const answer = await within(2_000, "the 413", request.answer)
    expect(answer.status, answer.text).toBe(413)
    expect(codeOf(answer)).toBe("request_body_too_large")
    expect(answer.headers.connection).toBe("close")
    expect(tempFiles(gw.dataDir)).toEqual([])
    // under the cap it is stored
    expect((await uploadForm(gw.port, KEYS.small, { data: pngBytes(SMALL_BODY - 1024) })).status).toBe(200)
  })

  it("a chunked body that grows over the app's cap is 413 and leaves no file", async () => {
    const before = (await listIds(KEYS.small)).length
    const form = formBody({ data: pngBytes(2 * SMALL_BODY) })
    const request = open(gw.port, "POST", "/v1/files", { authorization: `Bearer ${KEYS.small}`, "content-type": form.contentType })
    opened.push(request)
    for (let at = 0; at < form.body.length && !request.answered(); at += 8 * KiB) await request.write(form.body.subarray(at, at + 8 * KiB))
    const answer = await within(5_000, "the 413", request.answer)
    expect(answer.status, answer.text).toBe(413)
    expect(["request_body_too_large", "file_too_large"]).toContain(codeOf(answer))
    await until("no temporary file", () => tempFiles(gw.dataDir).length === 0, 2_000)
    expect((await listIds(KEYS.small)).length).toBe(before)
  })

  it("a file of no accepted kind is 400 invalid_file (the stage's own error, not a 500) and leaves no file", async () => {
    const before = await listIds(KEYS.text)
    const bytes = Buffer.alloc(4096, 0x01)
    const answer = await uploadForm(gw.port, KEYS.text, { data: bytes, filename: "blob.bin", type: "application/octet-stream" })
    expect(answer.status, answer.text).toBe(400)
    expect(codeOf(answer)).toBe("invalid_file")
    expect(tempFiles(gw.dataDir)).toEqual([])
    expect(await listIds(KEYS.text)).toEqual(before)
  })

  it("text over 4 MiB is 413 file_too_large and leaves no file; exactly 4 MiB is stored", async () => {
    const over = await uploadForm(gw.port, KEYS.text, { data: textBytes(4 * MiB + 1), filename: "big.txt", type: "text/plain" })
    expect(over.status, over.text).toBe(413)
    expect(codeOf(over)).toBe("file_too_large")
    expect(tempFiles(gw.dataDir)).toEqual([])
    expect(await listIds(KEYS.text)).toEqual([])

    const data = textBytes(4 * MiB)
    const fits = await uploadForm(gw.port, KEYS.text, { data, filename: "fits.txt", type: "text/plain" })
    expect(fits.status, fits.text).toBe(200)
    expect(jsonOf(fits).bytes).toBe(4 * MiB)
    expect(sha256(await contentOf(KEYS.text, String(jsonOf(fits).id)))).toBe(sha256(data))
  })
})

describe("per-app limits", () => {
  it(
    "1000 files per app: the 1001st is 400 file_limit_exceeded before its body is read; nothing is deleted; a delete makes room",
    async () => {
      const key = KEYS.many
      const ids: Array<string> = []
      // 4 at a time: the queue runs them one after another anyway
      for (let i = 0; i < 1000; i += 4) {
        const answers = await Promise.all([0, 1, 2, 3].map((j) => uploadForm(gw.port, key, { data: Buffer.from(`file ${i + j}\n`), filename: `f${i + j}.txt`, type: "text/plain" })))
        for (const a of answers) {
          expect(a.status, a.text).toBe(200)
          ids.push(String(jsonOf(a).id))
        }
      }
      const form = formBody({ data: Buffer.from("one too many\n"), filename: "x.txt", type: "text/plain" })
      const request = open(gw.port, "POST", "/v1/files", { authorization: `Bearer ${key}`, "content-type": form.contentType, "content-length": form.body.length })
      opened.push(request)
      const refused = await within(2_000, "the 1001st upload's answer", request.answer)
      expect(refused.status, refused.text).toBe(400)
      expect(codeOf(refused)).toBe("file_limit_exceeded")
      expect((await listIds(key)).map((f) => f.id)).toEqual(ids)

      const removed = await call(gw.port, "DELETE", `/v1/files/${ids[0]}`, { authorization: `Bearer ${key}` })
      expect(removed.status, removed.text).toBe(200)
      const after = await uploadForm(gw.port, key, { data: Buffer.from("room again\n"), filename: "y.txt", type: "text/plain" })
      expect(after.status, after.text).toBe(200)
      expect(tempFiles(gw.dataDir)).toEqual([])
    },
    60_000
  )

  // 1 GiB per app (file_storage_full) has no config hook to lower it; it is covered at the
  // FileStore level by test/services/files/FileStore.test.ts ("maxBytes: 400 file_storage_full").
})
