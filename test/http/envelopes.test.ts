import { describe, expect, it } from "vitest"
import { Errors, GatewayError, UpstreamError, upstreamToGateway } from "../../src/domain/Errors.js"
import { renderError, type Family, type RenderedError } from "../../src/http/Envelopes.js"

/**
 * The four error envelopes (spec section 7): one GatewayError rendered for each family.
 */

type Json = Record<string, unknown>

const requestId = "req_0123456789abcdef01234567"
const instance = "/gateway/thing?x=1"

const render = (family: Family, error: GatewayError): { readonly rendered: RenderedError; readonly body: Json } => {
  const rendered = renderError(family, error, instance, requestId)
  return { rendered, body: JSON.parse(rendered.body) as Json }
}

const errorOf = (body: Json): Json => body.error as Json

/** A representative set of refusals, each with the status it carries. */
const cases = {
  badParam: Errors.invalidRequest("invalid_request_error", "must be a string", { param: "messages.0.content" }),
  badNoParam: Errors.invalidRequest("invalid_json", "The request body is not valid JSON"),
  unauthenticated: Errors.authentication("invalid_api_key", "Invalid API key"),
  forbidden: Errors.permission("cross_origin_forbidden", "Browser requests from another origin are refused"),
  notFound: Errors.notFound("not_found", "No route for GET /nope"),
  methodNotAllowed: Errors.methodNotAllowed("method_not_allowed", "Method GET is not allowed", { param: "POST" }),
  requestTimeout: Errors.requestTimeout("body_read_timeout", "Request body stopped arriving", { closeConnection: true }),
  tooLarge: Errors.payloadTooLarge("request_body_too_large", "Request body is larger than the limit", { closeConnection: true }),
  mediaType: Errors.unsupportedMediaType("unsupported_media_type", "The request body must be application/json"),
  rateLimited: Errors.rateLimited("too_many_requests", "Too many model requests in flight", { retryAfter: 1 }),
  internal: Errors.internal("internal_error", "The gateway failed"),
  badGateway: Errors.upstream("upstream_error", "provider p failed"),
  unavailable: Errors.unavailable("server_busy", "The gateway is reading too many request bodies", { retryAfter: 1 }),
  providerUnavailable: upstreamToGateway(new UpstreamError({ reason: "unavailable", upstreamStatus: 503, provider: "p", message: "x" })),
  overloaded: upstreamToGateway(new UpstreamError({ reason: "overloaded", upstreamStatus: 529, provider: "p", message: "x" })),
  timeout: Errors.timeout("timeout", "The request ran past 500 ms")
} as const satisfies Record<string, GatewayError>

const allCases = Object.entries(cases) as ReadonlyArray<[string, GatewayError]>

describe("OpenAI envelope {error:{message,type,param,code}}", () => {
  const expected: Record<keyof typeof cases, { readonly status: number; readonly type: string }> = {
    badParam: { status: 400, type: "invalid_request_error" },
    badNoParam: { status: 400, type: "invalid_request_error" },
    unauthenticated: { status: 401, type: "authentication_error" },
    forbidden: { status: 403, type: "permission_error" },
    notFound: { status: 404, type: "invalid_request_error" },
    methodNotAllowed: { status: 405, type: "invalid_request_error" },
    requestTimeout: { status: 408, type: "invalid_request_error" },
    tooLarge: { status: 413, type: "invalid_request_error" },
    mediaType: { status: 415, type: "invalid_request_error" },
    rateLimited: { status: 429, type: "rate_limit_error" },
    internal: { status: 500, type: "server_error" },
    badGateway: { status: 502, type: "server_error" },
    unavailable: { status: 503, type: "server_error" },
    providerUnavailable: { status: 503, type: "server_error" },
    overloaded: { status: 503, type: "server_error" },
    timeout: { status: 504, type: "server_error" }
  }

  for (const [name, error] of allCases) {
    it(`${name}: ${error.code}`, () => {
      const { body, rendered } = render("openai", error)
      const want = expected[name as keyof typeof cases]
      expect(rendered.status).toBe(want.status)
      expect(rendered.contentType).toBe("application/json")
      expect(Object.keys(body)).toEqual(["error"])
      const e = errorOf(body)
      expect(Object.keys(e).sort()).toEqual(["code", "message", "param", "type"])
      expect(e).toEqual({ message: error.message, type: want.type, param: error.param ?? null, code: error.code })
    })
  }

  it("provider overload is 503 server_error with code provider_overloaded", () => {
    const { body, rendered } = render("openai", cases.overloaded)
    expect(rendered.status).toBe(503)
    expect(errorOf(body)).toMatchObject({ type: "server_error", code: "provider_overloaded", param: null })
  })

  it("a 400 names its param", () => {
    expect(errorOf(render("openai", cases.badParam).body).param).toBe("messages.0.content")
  })
})

describe("Messages envelope {type:error,error:{type,message}} (spec 7.3)", () => {
  const expected: Record<keyof typeof cases, { readonly status: number; readonly type: string }> = {
    badParam: { status: 400, type: "invalid_request_error" },
    badNoParam: { status: 400, type: "invalid_request_error" },
    unauthenticated: { status: 401, type: "authentication_error" },
    forbidden: { status: 403, type: "permission_error" },
    notFound: { status: 404, type: "not_found_error" },
    methodNotAllowed: { status: 405, type: "invalid_request_error" },
    requestTimeout: { status: 408, type: "api_error" },
    tooLarge: { status: 413, type: "request_too_large" },
    mediaType: { status: 415, type: "invalid_request_error" },
    rateLimited: { status: 429, type: "rate_limit_error" },
    internal: { status: 500, type: "api_error" },
    badGateway: { status: 502, type: "api_error" },
    unavailable: { status: 503, type: "api_error" },
    providerUnavailable: { status: 503, type: "api_error" },
    overloaded: { status: 529, type: "overloaded_error" },
    timeout: { status: 504, type: "timeout_error" }
  }

  for (const [name, error] of allCases) {
    it(`${name}: ${error.code}`, () => {
      const { body, rendered } = render("messages", error)
      const want = expected[name as keyof typeof cases]
      expect(rendered.status).toBe(want.status)
      expect(rendered.contentType).toBe("application/json")
      expect(Object.keys(body).sort()).toEqual(["error", "type"])
      expect(body.type).toBe("error")
      const e = errorOf(body)
      // the error object has no code or param
      expect(Object.keys(e).sort()).toEqual(["message", "type"])
      expect(e.type).toBe(want.type)
      expect(typeof e.message).toBe("string")
    })
  }

  it("a 400 with a param names the field in its message", () => {
    const e = errorOf(render("messages", cases.badParam).body)
    expect(e.message).toBe("messages.0.content: must be a string")
  })

  it("a message that already starts with its param is not prefixed twice", () => {
    const error = Errors.invalidRequest("invalid_request_error", "tools.0.type: unsupported tool type", { param: "tools.0.type" })
    expect(errorOf(render("messages", error).body).message).toBe("tools.0.type: unsupported tool type")
  })

  it("the upstream's own 503 stays api_error on 503; overload is 529 overloaded_error", () => {
    expect(render("messages", cases.providerUnavailable).rendered.status).toBe(503)
    expect(errorOf(render("messages", cases.providerUnavailable).body).type).toBe("api_error")
    expect(render("messages", cases.overloaded).rendered.status).toBe(529)
    expect(errorOf(render("messages", cases.overloaded).body).type).toBe("overloaded_error")
  })
})

describe("Gemini envelope {error:{code,message,status,details}} (spec 7.4)", () => {
  const expected: Record<keyof typeof cases, { readonly status: number; readonly name: string }> = {
    badParam: { status: 400, name: "INVALID_ARGUMENT" },
    badNoParam: { status: 400, name: "INVALID_ARGUMENT" },
    unauthenticated: { status: 401, name: "UNAUTHENTICATED" },
    forbidden: { status: 403, name: "PERMISSION_DENIED" },
    notFound: { status: 404, name: "NOT_FOUND" },
    methodNotAllowed: { status: 405, name: "INVALID_ARGUMENT" },
    requestTimeout: { status: 408, name: "INVALID_ARGUMENT" },
    tooLarge: { status: 413, name: "INVALID_ARGUMENT" },
    mediaType: { status: 415, name: "INVALID_ARGUMENT" },
    rateLimited: { status: 429, name: "RESOURCE_EXHAUSTED" },
    internal: { status: 500, name: "INTERNAL" },
    badGateway: { status: 502, name: "INTERNAL" },
    unavailable: { status: 503, name: "UNAVAILABLE" },
    providerUnavailable: { status: 503, name: "UNAVAILABLE" },
    overloaded: { status: 503, name: "UNAVAILABLE" },
    timeout: { status: 504, name: "DEADLINE_EXCEEDED" }
  }
  const allowedNames = ["INVALID_ARGUMENT", "UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND", "RESOURCE_EXHAUSTED", "INTERNAL", "UNAVAILABLE", "DEADLINE_EXCEEDED"]

  for (const [name, error] of allCases) {
    it(`${name}: ${error.code}`, () => {
      const { body, rendered } = render("gemini", error)
      const want = expected[name as keyof typeof cases]
      expect(rendered.status).toBe(want.status)
      expect(rendered.contentType).toBe("application/json")
      expect(Object.keys(body)).toEqual(["error"])
      const e = errorOf(body)
      expect(e.code).toBe(want.status)
      expect(e.status).toBe(want.name)
      expect(allowedNames).toContain(e.status)
      expect(e.message).toBe(error.message)
      if (name !== "badParam") expect(e.details).toBeUndefined()
    })
  }

  it("a 400 with a param names the field in details.fieldViolations", () => {
    const e = errorOf(render("gemini", cases.badParam).body)
    expect(e.details).toEqual([
      {
        "@type": "type.googleapis.com/google.rpc.BadRequest",
        fieldViolations: [{ field: "messages.0.content", description: "must be a string" }]
      }
    ])
  })

  it("a param on a non-400 refusal gives no fieldViolations", () => {
    const e = errorOf(render("gemini", Errors.notFound("model_not_found", "The model 'x' does not exist", { param: "model" })).body)
    expect(e.status).toBe("NOT_FOUND")
    expect(e.details).toBeUndefined()
  })
})

describe("problem details for own routes (spec 7.1)", () => {
  const titles: Record<keyof typeof cases, { readonly status: number; readonly title: string }> = {
    badParam: { status: 400, title: "Bad Request" },
    badNoParam: { status: 400, title: "Bad Request" },
    unauthenticated: { status: 401, title: "Unauthorized" },
    forbidden: { status: 403, title: "Forbidden" },
    notFound: { status: 404, title: "Not Found" },
    methodNotAllowed: { status: 405, title: "Method Not Allowed" },
    requestTimeout: { status: 408, title: "Request Timeout" },
    tooLarge: { status: 413, title: "Content Too Large" },
    mediaType: { status: 415, title: "Unsupported Media Type" },
    rateLimited: { status: 429, title: "Too Many Requests" },
    internal: { status: 500, title: "Internal Server Error" },
    badGateway: { status: 502, title: "Bad Gateway" },
    unavailable: { status: 503, title: "Service Unavailable" },
    providerUnavailable: { status: 503, title: "Service Unavailable" },
    overloaded: { status: 503, title: "Service Unavailable" },
    timeout: { status: 504, title: "Gateway Timeout" }
  }

  for (const [name, error] of allCases) {
    it(`${name}: ${error.code}`, () => {
      const { body, rendered } = render("gateway", error)
      const want = titles[name as keyof typeof cases]
      expect(rendered.status).toBe(want.status)
      expect(rendered.contentType).toBe("application/problem+json")
      const keys = ["code", "detail", "instance", "requestId", "status", "title", "type"]
      expect(Object.keys(body).sort()).toEqual(error.param === undefined ? keys : [...keys, "param"].sort())
      expect(body).toMatchObject({ title: want.title, status: want.status, detail: error.message, instance, code: error.code, requestId })
      if (error.param !== undefined) expect(body.param).toBe(error.param)
      expect(typeof body.type).toBe("string")
    })
  }

  it("type is an anchor URI for a listed code and about:blank otherwise", () => {
    const listed = render("gateway", cases.notFound).body.type as string
    expect(listed).not.toBe("about:blank")
    expect(listed.endsWith("#not_found")).toBe(true)
    for (const code of ["invalid_host", "cross_origin_forbidden", "request_body_too_large", "server_busy", "body_read_timeout", "timeout"]) {
      const type = render("gateway", new GatewayError({ kind: "invalid_request", status: 400, code, message: "m" })).body.type as string
      expect(type.endsWith(`#${code}`)).toBe(true)
    }
    expect(render("gateway", cases.internal).body.type).toBe("about:blank")
  })

  it("a 400 with a param carries it", () => {
    expect(render("gateway", Errors.invalidRequest("invalid_date", "from is not a date", { param: "from" })).body).toMatchObject({
      code: "invalid_date",
      param: "from"
    })
  })
})
