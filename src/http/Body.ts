import { Effect } from "effect"
import type { IncomingMessage } from "node:http"
import { Errors, type GatewayError } from "../domain/Errors.js"
import type { BodyReservation } from "../services/runner/Limits.js"

export interface BodyLimits {
  readonly maxBytes: number
  /** longest pause between two pieces of the body */
  readonly idleMs: number
  /** longest time for the whole body */
  readonly totalMs: number
  /** reserve bytes against the in-flight budget */
  readonly reserve: (bytes: number) => Effect.Effect<BodyReservation, GatewayError>
}

const tooLarge = (max: number) =>
  Errors.payloadTooLarge("request_body_too_large", `Request body is larger than the limit of ${max} bytes`, { closeConnection: true })

/** Chunked bodies reserve the in-flight budget in steps of this many bytes. */
const reserveStep = 64 * 1024

/**
 * Read a whole request body with the size cap, the in-flight byte budget and both read timeouts.
 * A declared `Content-Length` over the cap is refused before a byte is read. On refusal the
 * connection is marked for closing, since the rest of the body stays unread.
 */
export const readBody = (incoming: IncomingMessage, limits: BodyLimits): Effect.Effect<Buffer, GatewayError> =>
  Effect.suspend(() => {
    const declared = incoming.headers["content-length"]
    const length = declared === undefined ? undefined : Number(declared)
    if (length !== undefined && (!Number.isSafeInteger(length) || length < 0)) {
      return Effect.fail(Errors.invalidRequest("invalid_request", "Content-Length is not a valid length", { closeConnection: true }))
    }
    if (length !== undefined && length > limits.maxBytes) return Effect.fail(tooLarge(limits.maxBytes))
    if (length === 0) return Effect.succeed(Buffer.alloc(0))
    // the reservation is released when the read ends, fails or is interrupted (collect's cleanup)
    return Effect.flatMap(limits.reserve(length ?? Math.min(reserveStep, limits.maxBytes)), (reservation) => collect(incoming, limits, reservation, length))
  })

const collect = (
  incoming: IncomingMessage,
  limits: BodyLimits,
  reservation: BodyReservation,
  length: number | undefined
): Effect.Effect<Buffer, GatewayError> =>
  Effect.async<Buffer, GatewayError>((resume) => {
    const chunks: Array<Buffer> = []
    let received = 0
    let reserved = length ?? Math.min(reserveStep, limits.maxBytes)
    let done = false
    const finish = (result: Effect.Effect<Buffer, GatewayError>) => {
      if (done) return
      done = true
      cleanup()
      resume(result)
    }
    const fail = (error: GatewayError) => {
      incoming.pause()
      finish(Effect.fail(error))
    }
    let idle = setTimeout(onIdle, limits.idleMs)
    const total = setTimeout(onTotal, limits.totalMs)
    function onIdle() {
      fail(Errors.requestTimeout("body_read_timeout", `Request body stopped arriving for ${limits.idleMs} ms`, { closeConnection: true }))
    }
    function onTotal() {
      fail(Errors.requestTimeout("body_read_timeout", `Request body was not complete within ${limits.totalMs} ms`, { closeConnection: true }))
    }
    const onData = (chunk: Buffer) => {
      received += chunk.length
      if (received > limits.maxBytes) return fail(tooLarge(limits.maxBytes))
      if (length !== undefined && received > length) {
        return fail(Errors.invalidRequest("invalid_request", "Request body is longer than its Content-Length", { closeConnection: true }))
      }
      if (received > reserved) {
        const step = Math.min(Math.max(reserveStep, received - reserved), limits.maxBytes - reserved)
        const error = reservation.grow(step)
        if (error !== undefined) return fail(Errors.unavailable(error.code, error.message, { retryAfter: error.retryAfter ?? 1, closeConnection: true }))
        reserved += step
      }
      chunks.push(chunk)
      clearTimeout(idle)
      idle = setTimeout(onIdle, limits.idleMs)
    }
    const onEnd = () => finish(Effect.succeed(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, received)))
    const onAborted = () => finish(Effect.fail(Errors.invalidRequest("client_closed", "The client closed the connection before the body was complete")))
    const onError = () => onAborted()
    function cleanup() {
      reservation.release()
      clearTimeout(idle)
      clearTimeout(total)
      incoming.off("data", onData)
      incoming.off("end", onEnd)
      incoming.off("aborted", onAborted)
      incoming.off("error", onError)
      incoming.off("close", onClose)
    }
    const onClose = () => {
      if (!incoming.complete) onAborted()
    }
    incoming.on("data", onData)
    incoming.on("end", onEnd)
    incoming.on("aborted", onAborted)
    incoming.on("error", onError)
    incoming.on("close", onClose)
    return Effect.sync(cleanup)
  })

/** Whether a Content-Type header names JSON (`application/json`, with or without parameters). */
export const isJsonContentType = (value: string | undefined): boolean => {
  if (value === undefined) return false
  const semi = value.indexOf(";")
  const type = (semi < 0 ? value : value.slice(0, semi)).trim().toLowerCase()
  return type === "application/json"
}
