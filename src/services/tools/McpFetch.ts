import { setMaxListeners } from "node:events"
import { Readable } from "node:stream"
import { Agent, request } from "undici"

/**
 * The `fetch` an HTTP tool server's MCP transport sends with: undici's `request` over a keep-alive
 * Agent of the connection's own, its answer handed back as a web `Response`. With Node's global
 * `fetch` (WHATWG fetch, undici inside: its Request, fetch controller and body streams) a tool call
 * cost the gateway about 1.5x the CPU and allocation (124 against 80 KB of V8 heap per call of the
 * SDK client; `npm run bench -- --host-tools`, scratchpad/hosttools/); and with it a server speaking the
 * 2025 revisions, whose requests all carry the transport's one long-lived signal, made every call
 * add an abort listener to that signal that only garbage collection removed, printing a
 * MaxListenersExceededWarning per call past 1500.
 *
 * Same behaviour as the SDK's use of `fetch`: no redirect is followed here (the SDK follows
 * same-origin ones itself, from the status and `location`), the request's signal aborts the
 * exchange, body and header timeouts are undici's defaults (as fetch's), an event stream is
 * streamed and any other body is read whole before the `Response` is made. A request this does
 * not cover (a body other than text or bytes) goes to the global `fetch`.
 */

export type McpFetch = ((url: string | URL, init?: RequestInit) => Promise<Response>) & { readonly close: () => Promise<void> }

/** statuses whose `Response` has no body */
const NULL_BODY = new Set([101, 103, 204, 205, 304])

export const mcpFetch = (): McpFetch => {
  const agent = new Agent({ keepAliveTimeout: 30_000 })
  const send = async (url: string | URL, init?: RequestInit): Promise<Response> => {
    const body = init?.body
    if (body !== undefined && body !== null && typeof body !== "string" && !(body instanceof Uint8Array)) return fetch(url, init)
    const headers: Record<string, string> = {}
    new Headers(init?.headers).forEach((value, name) => (headers[name] = value))
    const signal = init?.signal ?? undefined
    // every request of a 2025-era session carries the transport's signal: one listener per call in flight
    if (signal !== undefined) setMaxListeners(0, signal)
    const method = init?.method ?? "GET"
    const answer = await request(url, { method, headers, ...(body !== undefined && body !== null ? { body } : {}), ...(signal !== undefined ? { signal } : {}), dispatcher: agent })
    const out = new Headers()
    for (const [name, value] of Object.entries(answer.headers)) {
      if (Array.isArray(value)) for (const v of value) out.append(name, v)
      else if (value !== undefined) out.set(name, value)
    }
    const status = answer.statusCode
    if (NULL_BODY.has(status) || method === "HEAD") {
      await answer.body.dump()
      return new Response(null, { status, headers: out })
    }
    if ((out.get("content-type") ?? "").toLowerCase().startsWith("text/event-stream")) {
      return new Response(Readable.toWeb(answer.body), { status, headers: out })
    }
    return new Response(await answer.body.arrayBuffer(), { status, headers: out })
  }
  return Object.assign(send, { close: () => agent.destroy() })
}
