/**
 * Gemini Schema to JSON Schema conversion (spec 4.3, `tools` row): one example per rule, and
 * fast-check properties over arbitrary (realistic and odd) Gemini schemas.
 */
import { Ajv } from "ajv"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { geminiSchemaToJsonSchema as convert, lowerCaseTypes } from "../../../src/protocols/gemini/ToJsonSchema.js"

const ajv = new Ajv({ strict: false })

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** Every schema node of a converted schema: the root and nodes under items, properties and anyOf. */
const schemaNodes = (schema: unknown): Array<Record<string, unknown>> => {
  if (!isRecord(schema)) return []
  const nodes = [schema]
  const items = schema.items
  if (Array.isArray(items)) for (const item of items) nodes.push(...schemaNodes(item))
  else nodes.push(...schemaNodes(items))
  if (isRecord(schema.properties)) for (const value of Object.values(schema.properties)) nodes.push(...schemaNodes(value))
  if (Array.isArray(schema.anyOf)) for (const branch of schema.anyOf) nodes.push(...schemaNodes(branch))
  return nodes
}

const ALLOWED_KEYS = new Set([
  "type",
  "format",
  "title",
  "description",
  "enum",
  "items",
  "properties",
  "required",
  "minItems",
  "maxItems",
  "minLength",
  "maxLength",
  "minProperties",
  "maxProperties",
  "minimum",
  "maximum",
  "pattern",
  "default",
  "anyOf"
])

// ---------------------------------------------------------------------------------------------
// Examples
// ---------------------------------------------------------------------------------------------

describe("geminiSchemaToJsonSchema: examples", () => {
  it("absent or null schema means no arguments", () => {
    expect(convert(undefined)).toEqual({ type: "object", properties: {} })
    expect(convert(null)).toEqual({ type: "object", properties: {} })
  })

  it("non-object schemas become {}", () => {
    for (const garbage of ["OBJECT", 42, true, [], [{ type: "STRING" }], Number.NaN]) expect(convert(garbage)).toEqual({})
    expect(convert({ type: "ARRAY", items: "STRING" })).toEqual({ type: "array", items: {} })
    expect(convert({ type: "OBJECT", properties: { a: 7, b: null } })).toEqual({
      type: "object",
      properties: { a: {}, b: {} }
    })
  })

  it("maps types in any case to lowercase JSON Schema types", () => {
    const cases: Array<[unknown, string]> = [
      ["STRING", "string"],
      ["number", "number"],
      ["Integer", "integer"],
      ["BOOLEAN", "boolean"],
      ["array", "array"],
      ["OBJECT", "object"],
      ["NULL", "null"],
      [1, "string"],
      [6, "object"]
    ]
    for (const [type, expected] of cases) expect(convert({ type })).toEqual({ type: expected })
  })

  it("drops TYPE_UNSPECIFIED and unknown types", () => {
    expect(convert({ type: "TYPE_UNSPECIFIED", description: "anything" })).toEqual({ description: "anything" })
    expect(convert({ type: "FLOAT" })).toEqual({})
    expect(convert({ type: 0 })).toEqual({})
    expect(convert({ type: { nested: true } })).toEqual({})
  })

  it("nullable adds a null type", () => {
    expect(convert({ type: "STRING", nullable: true })).toEqual({ type: ["string", "null"] })
    expect(convert({ type: "NULL", nullable: true })).toEqual({ type: "null" })
    expect(convert({ type: "STRING", nullable: false })).toEqual({ type: "string" })
    expect(convert({ type: "STRING", nullable: "true" })).toEqual({ type: "string" })
  })

  it("nullable adds null to an enum and to an untyped anyOf", () => {
    expect(convert({ type: "STRING", format: "enum", enum: ["a", "b"], nullable: true })).toEqual({
      type: ["string", "null"],
      enum: ["a", "b", null]
    })
    expect(convert({ nullable: true, anyOf: [{ type: "STRING" }, { type: "INTEGER" }] })).toEqual({
      anyOf: [{ type: "string" }, { type: "integer" }, { type: "null" }]
    })
  })

  it("keeps JSON Schema formats and drops OpenAPI ones", () => {
    for (const format of ["date-time", "date", "time", "email", "uri", "uuid", "ipv4"])
      expect(convert({ type: "STRING", format })).toEqual({ type: "string", format })
    for (const format of ["int32", "int64", "float", "double", "enum", "byte", "binary", "password", 7])
      expect(convert({ type: "NUMBER", format })).toEqual({ type: "number" })
  })

  it("keeps description, title, pattern, default, minimum and maximum", () => {
    expect(
      convert({
        type: "INTEGER",
        title: "Age",
        description: "Age in years",
        minimum: 0,
        maximum: "150",
        default: 30
      })
    ).toEqual({ type: "integer", title: "Age", description: "Age in years", minimum: 0, maximum: 150, default: 30 })
    expect(convert({ type: "STRING", pattern: "^[a-z]+$" })).toEqual({ type: "string", pattern: "^[a-z]+$" })
    expect(convert({ type: "STRING", pattern: "(?P<x>a)" })).toEqual({ type: "string" })
    expect(convert({ minimum: "abc", maximum: Number.POSITIVE_INFINITY })).toEqual({})
    expect(convert({ default: null })).toEqual({ default: null })
  })

  it("keeps enum values, deduplicated, and drops malformed enums", () => {
    expect(convert({ type: "STRING", enum: ["a", "b", "a"] })).toEqual({ type: "string", enum: ["a", "b"] })
    expect(convert({ type: "STRING", enum: [] })).toEqual({ type: "string" })
    expect(convert({ type: "STRING", enum: "a" })).toEqual({ type: "string" })
  })

  it("converts string counts to numbers and drops non-numeric ones", () => {
    expect(convert({ type: "ARRAY", minItems: "1", maxItems: "10", items: { type: "STRING" } })).toEqual({
      type: "array",
      items: { type: "string" },
      minItems: 1,
      maxItems: 10
    })
    expect(convert({ type: "STRING", minLength: "2", maxLength: 5 })).toEqual({
      type: "string",
      minLength: 2,
      maxLength: 5
    })
    expect(convert({ type: "OBJECT", minProperties: "1", maxProperties: "3" })).toEqual({
      type: "object",
      minProperties: 1,
      maxProperties: 3
    })
    expect(convert({ minItems: "many", maxItems: -1, minLength: 1.5, maxLength: "", minProperties: null })).toEqual({})
  })

  it("converts items, properties and anyOf recursively", () => {
    const gemini = {
      type: "OBJECT",
      properties: {
        tags: { type: "ARRAY", items: { type: "STRING", nullable: true, example: "x" }, minItems: "1" },
        where: {
          type: "OBJECT",
          properties: { lat: { type: "NUMBER", format: "double" }, lng: { type: "NUMBER", format: "float" } },
          required: ["lat", "lng"],
          propertyOrdering: ["lat", "lng"]
        },
        id: { anyOf: [{ type: "STRING", format: "uuid" }, { type: "INTEGER", format: "int64" }] }
      },
      required: ["tags"],
      propertyOrdering: ["tags", "where", "id"],
      example: { tags: ["a"] }
    }
    expect(convert(gemini)).toEqual({
      type: "object",
      properties: {
        tags: { type: "array", items: { type: ["string", "null"] }, minItems: 1 },
        where: {
          type: "object",
          properties: { lat: { type: "number" }, lng: { type: "number" } },
          required: ["lat", "lng"]
        },
        id: { anyOf: [{ type: "string", format: "uuid" }, { type: "integer" }] }
      },
      required: ["tags"]
    })
  })

  it("keeps required names that are strings, deduplicated", () => {
    expect(convert({ type: "OBJECT", required: ["a", 1, "a", null, "b"] })).toEqual({
      type: "object",
      required: ["a", "b"]
    })
    expect(convert({ type: "OBJECT", required: "a" })).toEqual({ type: "object" })
  })

  it("drops Gemini-only and unknown keys but keeps properties with those names", () => {
    expect(
      convert({
        type: "OBJECT",
        example: { a: 1 },
        propertyOrdering: ["example"],
        additionalInfo: 1,
        nullable: false,
        properties: { example: { type: "STRING" }, propertyOrdering: { type: "STRING" }, nullable: { type: "BOOLEAN" } }
      })
    ).toEqual({
      type: "object",
      properties: { example: { type: "string" }, propertyOrdering: { type: "string" }, nullable: { type: "boolean" } }
    })
  })

  it("keeps a __proto__ property name as an ordinary property", () => {
    const out = convert(JSON.parse('{"type":"OBJECT","properties":{"__proto__":{"type":"STRING"}}}'))
    const properties = out.properties
    expect(isRecord(properties) && Object.prototype.hasOwnProperty.call(properties, "__proto__")).toBe(true)
    expect(Object.getPrototypeOf(properties)).toBe(Object.prototype)
  })

  it("does not loop on cyclic or very deep input", () => {
    const cyclic: Record<string, unknown> = { type: "OBJECT" }
    cyclic.properties = { self: cyclic }
    cyclic.items = cyclic
    expect(convert(cyclic)).toEqual({ type: "object", items: {}, properties: { self: {} } })
    let deep: Record<string, unknown> = { type: "STRING" }
    for (let i = 0; i < 10_000; i++) deep = { type: "ARRAY", items: deep }
    expect(() => convert(deep)).not.toThrow()
    expect(ajv.validateSchema(convert(deep))).toBe(true)
  })
})

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

const caseVariant = (word: string): fc.Arbitrary<string> =>
  fc.array(fc.boolean(), { minLength: word.length, maxLength: word.length }).map((upper) =>
    word
      .split("")
      .map((c, i) => (upper[i] ? c.toUpperCase() : c.toLowerCase()))
      .join("")
  )

const TYPE_WORDS = ["STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL", "TYPE_UNSPECIFIED"]

const typeArb: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...TYPE_WORDS) },
  { weight: 3, arbitrary: fc.constantFrom(...TYPE_WORDS).chain(caseVariant) },
  { weight: 1, arbitrary: fc.integer({ min: -1, max: 9 }) },
  { weight: 1, arbitrary: fc.array(fc.constantFrom(...TYPE_WORDS), { maxLength: 3 }) },
  { weight: 1, arbitrary: fc.anything({ maxDepth: 1 }) }
)

const countArb: fc.Arbitrary<unknown> = fc.oneof(
  fc.nat({ max: 100 }),
  fc.nat({ max: 100 }).map(String),
  fc.integer({ min: -5, max: -1 }),
  fc.double(),
  fc.constantFrom("", "abc", "1e3", " 7 ", "0x10", "1.5", "-1", "Infinity", null, true),
  fc.anything({ maxDepth: 1 })
)

const numberArb: fc.Arbitrary<unknown> = fc.oneof(
  fc.double(),
  fc.integer().map(String),
  fc.constantFrom("nope", "", null, Number.NaN, Number.NEGATIVE_INFINITY),
  fc.anything({ maxDepth: 1 })
)

const formatArb: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom("int32", "int64", "float", "double", "enum", "date-time", "date", "time", "email", "uri", "uuid"),
  fc.string({ maxLength: 8 }),
  fc.anything({ maxDepth: 1 })
)

const keyName = fc.oneof(
  fc.string({ maxLength: 8 }),
  fc.constantFrom("example", "propertyOrdering", "nullable", "__proto__", "type", "constructor", "$ref")
)

const unknownKey = fc.oneof(
  fc.string({ minLength: 1, maxLength: 10 }),
  fc.constantFrom("example", "propertyOrdering", "additionalProperties", "$schema", "$ref", "const", "oneOf", "not")
)

/** Small garbage values: anything, kept shallow so generated schemas stay small. */
const garbage = fc.anything({ maxDepth: 2, maxKeys: 3 })

const smallJson = fc.jsonValue({ maxDepth: 2 })

/** A Gemini schema node at most `depth` levels deep (fc.memo decreases the depth at each level). */
const geminiSchemaAt: fc.Memo<unknown> = fc.memo((depth) => {
  const child = (): fc.Arbitrary<unknown> =>
    depth <= 1 ? fc.oneof(fc.record({ type: typeArb }), garbage) : geminiSchemaAt(depth - 1)
  const node = fc
    .record(
      {
        type: typeArb,
        nullable: fc.oneof(fc.boolean(), garbage),
        format: formatArb,
        description: fc.oneof(fc.string(), garbage),
        title: fc.oneof(fc.string(), garbage),
        enum: fc.oneof(fc.array(fc.oneof(fc.string(), fc.integer(), fc.constant(null)), { maxLength: 4 }), garbage),
        items: child(),
        properties: fc.oneof(
          { weight: 4, arbitrary: fc.dictionary(keyName, child(), { maxKeys: 3 }) },
          { weight: 1, arbitrary: garbage }
        ),
        required: fc.oneof(fc.array(fc.oneof(fc.string({ maxLength: 6 }), garbage), { maxLength: 4 }), garbage),
        minItems: countArb,
        maxItems: countArb,
        minLength: countArb,
        maxLength: countArb,
        minProperties: countArb,
        maxProperties: countArb,
        minimum: numberArb,
        maximum: numberArb,
        pattern: fc.oneof(fc.constantFrom("^a+$", "[", "(?P<x>a)", "\\d{3}"), fc.string({ maxLength: 6 }), garbage),
        default: smallJson,
        example: smallJson,
        propertyOrdering: fc.oneof(fc.array(fc.string({ maxLength: 6 }), { maxLength: 3 }), garbage),
        anyOf: fc.oneof(
          { weight: 3, arbitrary: fc.array(child(), { maxLength: 3 }) },
          { weight: 1, arbitrary: garbage }
        )
      },
      { requiredKeys: [] }
    )
    .chain((fields) => fc.dictionary(unknownKey, garbage, { maxKeys: 2 }).map((extra) => ({ ...extra, ...fields })))
  return fc.oneof({ weight: 8, arbitrary: node }, { weight: 1, arbitrary: garbage })
})

const geminiSchemaArb: fc.Arbitrary<unknown> = geminiSchemaAt(4)

describe("geminiSchemaToJsonSchema: properties", () => {
  it("never throws and always yields a valid draft-07 JSON Schema", () => {
    fc.assert(
      fc.property(fc.oneof(geminiSchemaArb, fc.constantFrom(undefined, null)), (schema) => {
        const out = convert(schema)
        expect(isRecord(out)).toBe(true)
        const valid = ajv.validateSchema(out)
        if (valid !== true) throw new Error(`invalid schema ${JSON.stringify(out)}: ${ajv.errorsText(ajv.errors)}`)
      }),
      { numRuns: 500 }
    )
  })

  it("output compiles with ajv", () => {
    fc.assert(
      fc.property(geminiSchemaArb, (schema) => {
        expect(() => ajv.compile(convert(schema))).not.toThrow()
      }),
      { numRuns: 300 }
    )
  })

  it("no schema node carries example, propertyOrdering, nullable or any unknown key", () => {
    fc.assert(
      fc.property(geminiSchemaArb, (schema) => {
        for (const node of schemaNodes(convert(schema))) {
          expect(node).not.toHaveProperty(["example"])
          expect(node).not.toHaveProperty(["propertyOrdering"])
          expect(node).not.toHaveProperty(["nullable"])
          for (const key of Object.keys(node)) expect(ALLOWED_KEYS.has(key)).toBe(true)
        }
      }),
      { numRuns: 500 }
    )
  })

  it("types are lowercase JSON Schema types and counts are non-negative integers", () => {
    const jsonTypes = new Set(["string", "number", "integer", "boolean", "array", "object", "null"])
    fc.assert(
      fc.property(geminiSchemaArb, (schema) => {
        for (const node of schemaNodes(convert(schema))) {
          const types = node.type === undefined ? [] : Array.isArray(node.type) ? node.type : [node.type]
          for (const t of types) expect(typeof t === "string" && jsonTypes.has(t)).toBe(true)
          for (const key of ["minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"]) {
            const n = node[key]
            if (n !== undefined) expect(Number.isSafeInteger(n) && typeof n === "number" && n >= 0).toBe(true)
          }
        }
      }),
      { numRuns: 300 }
    )
  })

  it("nullable: true on a typed schema always admits null", () => {
    fc.assert(
      fc.property(fc.constantFrom(...TYPE_WORDS.slice(0, 7)).chain(caseVariant), (type) => {
        const out = convert({ type, nullable: true })
        expect(ajv.validate(out, null)).toBe(true)
      })
    )
  })

  it("is deterministic and does not mutate its input", () => {
    fc.assert(
      fc.property(geminiSchemaArb, (schema) => {
        const before = JSON.stringify(schema)
        expect(convert(schema)).toEqual(convert(schema))
        expect(JSON.stringify(schema)).toBe(before)
      }),
      { numRuns: 200 }
    )
  })
})

describe("lowerCaseTypes (JSON Schemas sent as is)", () => {
  it("lower-cases Gemini type names at every level and keeps the rest", () => {
    const given = {
      type: "OBJECT",
      $schema: "http://json-schema.org/draft-07/schema#",
      properties: { OBJECT: { type: "STRING", enum: ["OBJECT"] }, list: { type: ["ARRAY", "NULL"], items: { type: "INTEGER" } } },
      anyOf: [{ type: "BOOLEAN" }],
      additionalProperties: { type: "NUMBER" },
      $defs: { d: { type: "Object" } }
    }
    expect(lowerCaseTypes(given)).toEqual({
      type: "object",
      $schema: "http://json-schema.org/draft-07/schema#",
      properties: { OBJECT: { type: "string", enum: ["OBJECT"] }, list: { type: ["array", "null"], items: { type: "integer" } } },
      anyOf: [{ type: "boolean" }],
      additionalProperties: { type: "number" },
      $defs: { d: { type: "object" } }
    })
    // the caller's object is left alone
    expect(given.type).toBe("OBJECT")
    expect(lowerCaseTypes({ type: "custom" })).toEqual({ type: "custom" })
  })

  it("the result of a converted Gemini schema is unchanged and valid", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const converted = convert(value)
        expect(lowerCaseTypes(converted)).toEqual(converted)
        expect(ajv.validateSchema(lowerCaseTypes(converted) as object)).toBe(true)
      }),
      { numRuns: 200 }
    )
  })
})
