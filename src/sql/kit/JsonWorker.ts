import { Effect } from "effect"
import { Worker } from "node:worker_threads"

/**
 * JSON.parse of large texts on a worker thread, so that reading a multi-megabyte stored record
 * does not hold the event loop: the worker decodes and parses, and only the copy of the result
 * lands on the main thread. Started on first use, one per store, ended by `close`.
 */

const source = `
const { parentPort } = require("node:worker_threads")
parentPort.on("message", ({ id, bytes }) => {
  let value
  try {
    value = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8"))
  } catch {
    parentPort.postMessage({ id, ok: false })
    return
  }
  parentPort.postMessage({ id, ok: true, value })
})
`

interface Reply {
  readonly id: number
  readonly ok: boolean
  readonly value?: unknown
}

export interface JsonWorker {
  /** parse UTF-8 JSON bytes; fails with `undefined` when the bytes are not JSON or the worker died */
  readonly parse: (bytes: Uint8Array) => Effect.Effect<unknown, undefined>
  readonly close: Effect.Effect<void>
}

export const makeJsonWorker = (): JsonWorker => {
  let worker: Worker | undefined
  let next = 0
  const pending = new Map<number, (reply: Reply | undefined) => void>()
  const failAll = () => {
    for (const resolve of pending.values()) resolve(undefined)
    pending.clear()
    worker = undefined
  }
  const start = (): Worker => {
    const w = new Worker(source, { eval: true })
    w.unref()
    w.on("message", (reply: Reply) => {
      const resolve = pending.get(reply.id)
      pending.delete(reply.id)
      resolve?.(reply)
    })
    w.on("error", failAll)
    w.on("exit", failAll)
    return w
  }
  const parse = (bytes: Uint8Array) =>
    Effect.async<unknown, undefined>((resume) => {
      const id = next++
      pending.set(id, (reply) => resume(reply?.ok === true ? Effect.succeed(reply.value) : Effect.fail(undefined)))
      worker ??= start()
      worker.postMessage({ id, bytes })
      return Effect.sync(() => void pending.delete(id))
    })
  const close = Effect.promise(async () => {
    const w = worker
    worker = undefined
    if (w !== undefined) await w.terminate()
  })
  return { parse, close }
}
