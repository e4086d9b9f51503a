/**
 * Gemini `Schema` (OpenAPI 3.0 subset) to JSON Schema (draft-07 compatible) conversion, used for
 * `tools[].functionDeclarations[].parameters` (spec 4.3, `tools` row).
 *
 * Rules:
 * - `type` (STRING, NUMBER, INTEGER, BOOLEAN, ARRAY, OBJECT, NULL in any case, or the proto enum
 *   numbers 1..7) becomes the lowercase JSON Schema type; TYPE_UNSPECIFIED and unknown types are
 *   left out (any type).
 * - `nullable: true` adds `"null"`: the type becomes `[type, "null"]`, an `enum` gains `null`, and
 *   an untyped `anyOf` gains `{type: "null"}`.
 * - `format` is kept only when it is a JSON Schema format (date-time, email, uuid, ...); OpenAPI
 *   formats such as int32, int64, float, double and Gemini's `enum` are dropped.
 * - Count keywords (`minItems`, `maxItems`, `minLength`, `maxLength`, `minProperties`,
 *   `maxProperties`) accept numbers and numeric strings (Gemini sends int64 as strings) and must be
 *   non-negative integers; anything else is dropped. `minimum`/`maximum` accept finite numbers and
 *   numeric strings.
 * - `items`, `properties` and `anyOf` are converted recursively; `description`, `title`,
 *   `pattern` (when it compiles), `required`, `enum` and `default` are kept when well formed.
 * - Every other key (`example`, `propertyOrdering`, `nullable` itself, unknown keys) is dropped.
 *
 * Never throws: a non-object schema becomes `{}`; an absent (`undefined`/`null`) top-level schema
 * means "no arguments" and becomes `{type: "object", properties: {}}`.
 */

type JsonSchema = Record<string, unknown>

const MAX_DEPTH = 64

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const TYPE_NAMES: ReadonlyMap<string, string> = new Map([
  ["string", "string"],
  ["number", "number"],
  ["integer", "integer"],
  ["boolean", "boolean"],
  ["array", "array"],
  ["object", "object"],
  ["null", "null"]
])

/** google.ai.generativelanguage `Type` enum numbers. */
const TYPE_NUMBERS: ReadonlyArray<string | undefined> = [
  undefined, // TYPE_UNSPECIFIED
  "string",
  "number",
  "integer",
  "boolean",
  "array",
  "object",
  "null"
]

const JSON_SCHEMA_FORMATS: ReadonlySet<string> = new Set([
  "date-time",
  "date",
  "time",
  "duration",
  "email",
  "idn-email",
  "hostname",
  "idn-hostname",
  "ipv4",
  "ipv6",
  "uri",
  "uri-reference",
  "iri",
  "iri-reference",
  "uri-template",
  "uuid",
  "json-pointer",
  "relative-json-pointer",
  "regex"
])

const COUNT_KEYS = ["minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"] as const

const typeName = (value: unknown): string | undefined => {
  if (typeof value === "string") return TYPE_NAMES.get(value.trim().toLowerCase())
  if (typeof value === "number" && Number.isInteger(value)) return TYPE_NUMBERS[value]
  return undefined
}

/** The JSON Schema types named by a Gemini `type` (a single name, or tolerantly an array of names). */
const convertType = (value: unknown): Array<string> => {
  const names = Array.isArray(value) ? value.map(typeName) : [typeName(value)]
  const out: Array<string> = []
  for (const name of names) if (name !== undefined && !out.includes(name)) out.push(name)
  return out
}

const toNumber = (value: unknown): number | undefined => {
  if (typeof value === "number") return Number.isFinite(value) ? value : undefined
  if (typeof value === "string" && value.trim() !== "") {
    const n = Number(value)
    return Number.isFinite(n) ? n : undefined
  }
  return undefined
}

const toCount = (value: unknown): number | undefined => {
  const n = toNumber(value)
  return n !== undefined && Number.isSafeInteger(n) && n >= 0 ? n : undefined
}

const compiles = (pattern: string): boolean => {
  try {
    new RegExp(pattern, "u")
    return true
  } catch {
    return false
  }
}

const isEnumValue = (value: unknown): value is string | number | boolean | null =>
  value === null ||
  typeof value === "string" ||
  typeof value === "boolean" ||
  (typeof value === "number" && Number.isFinite(value))

const convertNode = (schema: unknown, depth: number, ancestors: Set<object>): JsonSchema => {
  if (!isRecord(schema) || depth > MAX_DEPTH || ancestors.has(schema)) return {}
  ancestors.add(schema)
  try {
    return convertRecord(schema, depth, ancestors)
  } finally {
    ancestors.delete(schema)
  }
}

const convertRecord = (schema: Record<string, unknown>, depth: number, ancestors: Set<object>): JsonSchema => {
  const child = (value: unknown): JsonSchema => convertNode(value, depth + 1, ancestors)
  const nullable = schema.nullable === true
  const out: Array<[string, unknown]> = []

  const types = convertType(schema.type)
  if (types.length > 0) {
    if (nullable && !types.includes("null")) types.push("null")
    out.push(["type", types.length === 1 ? types[0] : types])
  }

  if (typeof schema.format === "string" && JSON_SCHEMA_FORMATS.has(schema.format)) out.push(["format", schema.format])
  if (typeof schema.title === "string") out.push(["title", schema.title])
  if (typeof schema.description === "string") out.push(["description", schema.description])

  if (Array.isArray(schema.enum)) {
    const values: Array<string | number | boolean | null> = []
    for (const value of schema.enum) if (isEnumValue(value) && !values.includes(value)) values.push(value)
    if (values.length > 0) {
      if (nullable && !values.includes(null)) values.push(null)
      out.push(["enum", values])
    }
  }

  if (schema.items !== undefined) {
    // Gemini's items is one schema; a non-empty array is tolerated as a draft-07 tuple.
    if (!Array.isArray(schema.items)) out.push(["items", child(schema.items)])
    else if (schema.items.length > 0) out.push(["items", schema.items.map(child)])
  }

  if (isRecord(schema.properties)) {
    out.push([
      "properties",
      Object.fromEntries(Object.entries(schema.properties).map(([name, value]) => [name, child(value)]))
    ])
  }

  if (Array.isArray(schema.required)) {
    const names: Array<string> = []
    for (const name of schema.required) if (typeof name === "string" && !names.includes(name)) names.push(name)
    if (names.length > 0) out.push(["required", names])
  }

  for (const key of COUNT_KEYS) {
    const n = toCount(schema[key])
    if (n !== undefined) out.push([key, n])
  }

  for (const key of ["minimum", "maximum"] as const) {
    const n = toNumber(schema[key])
    if (n !== undefined) out.push([key, n])
  }

  if (typeof schema.pattern === "string" && compiles(schema.pattern)) out.push(["pattern", schema.pattern])

  if (schema.default !== undefined) out.push(["default", schema.default])

  if (Array.isArray(schema.anyOf) && schema.anyOf.length > 0) {
    const branches = schema.anyOf.map(child)
    if (nullable && types.length === 0 && !branches.some((b) => b.type === "null")) branches.push({ type: "null" })
    out.push(["anyOf", branches])
  }

  // Object.fromEntries defines own data properties, so a "__proto__" key stays an ordinary key.
  return Object.fromEntries(out)
}

/** Converts a Gemini function declaration `parameters` schema to JSON Schema. Never throws. */
export const geminiSchemaToJsonSchema = (schema: unknown): Record<string, unknown> =>
  schema === undefined || schema === null ? { type: "object", properties: {} } : convertNode(schema, 0, new Set())

/** Schema keywords whose value is one schema, a list of schemas, or a map of schemas. */
const ONE_SCHEMA = ["items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames", "additionalItems", "unevaluatedItems", "unevaluatedProperties"]
const SCHEMA_LISTS = ["anyOf", "allOf", "oneOf", "prefixItems"]
const SCHEMA_MAPS = ["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"]

/**
 * A JSON Schema sent as is (`parametersJsonSchema`, `responseJsonSchema`) with Gemini's upper-case
 * type names (`OBJECT`, `STRING`, ...) spelled as JSON Schema's lower-case ones. The Gemini CLI's
 * own routing schema uses them, and chat-completions upstreams refuse them. Everything else is
 * kept; the input is not modified. Never throws.
 */
export const lowerCaseTypes = (schema: unknown, depth = 0): unknown => {
  if (depth > MAX_DEPTH || typeof schema !== "object" || schema === null) return schema
  if (Array.isArray(schema)) return schema.map((s) => lowerCaseTypes(s, depth + 1))
  const out: Record<string, unknown> = { ...(schema as Record<string, unknown>) }
  const lower = (t: unknown) => (typeof t === "string" && TYPE_NAMES.has(t.toLowerCase()) ? t.toLowerCase() : t)
  if (typeof out.type === "string") out.type = lower(out.type)
  else if (Array.isArray(out.type)) out.type = out.type.map(lower)
  for (const key of ONE_SCHEMA) if (key in out) out[key] = lowerCaseTypes(out[key], depth + 1)
  for (const key of SCHEMA_LISTS) if (Array.isArray(out[key])) out[key] = (out[key] as Array<unknown>).map((s) => lowerCaseTypes(s, depth + 1))
  for (const key of SCHEMA_MAPS) {
    const map = out[key]
    if (isRecord(map)) out[key] = Object.fromEntries(Object.entries(map).map(([k, s]) => [k, lowerCaseTypes(s, depth + 1)]))
  }
  return out
}
