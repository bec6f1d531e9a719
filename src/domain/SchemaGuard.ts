/**
 * A Schema's check as a plain predicate: `guard(schema)` answers, for any input, exactly what
 * `Schema.decodeUnknownEither(schema, { onExcessProperty: "error" })` answers (accepted or
 * refused) without building the decoded copy, the `Either`s and the parse issues that decoding
 * makes on the way. It is for the checks that run on every append (the record catalogue's
 * payloads, docs/benchmarks.md "A record's check without a decoded copy"): a refusal is still
 * explained by the schema's own decoder, which the caller runs only then.
 *
 * Only the AST nodes that a decode answers by looking (no transformation) are compiled: structs
 * (property and string-index signatures), arrays and tuples, unions, literals, the keyword types
 * and refinements, whose own filter is called, and a declaration marked `ChecksByParameter`. For any other node `guard` returns `undefined` and
 * the caller keeps the decoder. test/domain/SchemaGuard.test.ts checks the two agree on every
 * catalogue kind, on payloads made by the schemas' arbitraries and on their mutations.
 */
import { Either, Option, type ParseResult, type Schema, Schema as SchemaModule, type SchemaAST as AST } from "effect"

export type Guard = (u: unknown) => boolean

/**
 * Marks a declaration that checks its input by its sole type parameter and decodes to the input
 * itself (Messages.ts's `keptAsSent`): its guard is that parameter's.
 */
export const ChecksByParameter: unique symbol = Symbol.for("brain/SchemaGuard/ChecksByParameter")

const OPTIONS: AST.ParseOptions = { onExcessProperty: "error", errors: "first" }

class Unsupported extends Error {}

const isRecord = (u: unknown): u is Record<PropertyKey, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const typeLiteral = (ast: AST.TypeLiteral, compile: (ast: AST.AST) => Guard): Guard => {
  // No signatures: any value but null and undefined (as the decoder, which then checks nothing more).
  if (ast.propertySignatures.length === 0 && ast.indexSignatures.length === 0) return (u) => u !== null && u !== undefined
  if (ast.indexSignatures.length > 1) throw new Unsupported()
  const index = ast.indexSignatures[0]
  if (index !== undefined && index.parameter._tag !== "StringKeyword") throw new Unsupported()
  const indexValue = index === undefined ? undefined : compile(index.type)
  const props = ast.propertySignatures.map((ps) => {
    if (typeof ps.name !== "string") throw new Unsupported()
    return { name: ps.name, optional: ps.isOptional, check: compile(ps.type) }
  })
  const names = new Set(props.map((p) => p.name))
  return (u) => {
    if (!isRecord(u)) return false
    // Excess properties: every own key must be expected (a string key is, under a string index).
    // A symbol key never is. Walked with `for…in` (V8's enum cache), not a key array per object:
    // this check runs on every object of every record appended.
    if (Object.getOwnPropertySymbols(u).length > 0) return false
    if (indexValue === undefined) {
      for (const key in u) if (!names.has(key)) return false
    }
    for (const p of props) {
      if (!Object.prototype.hasOwnProperty.call(u, p.name)) {
        if (p.optional) continue
        // A missing key is checked as `undefined` (the decoder without `exact` does the same).
        if (!p.check(undefined)) return false
        continue
      }
      if (!p.check(u[p.name])) return false
    }
    if (indexValue !== undefined) {
      for (const key of Object.keys(u)) if (!indexValue(u[key])) return false
    }
    return true
  }
}

const tupleType = (ast: AST.TupleType, compile: (ast: AST.AST) => Guard): Guard => {
  if (ast.rest.length > 1) throw new Unsupported()
  const elements = ast.elements.map((e) => ({ optional: e.isOptional, check: compile(e.type) }))
  const rest = ast.rest.length === 1 ? compile(ast.rest[0]!.type) : undefined
  return (u) => {
    if (!Array.isArray(u)) return false
    for (let i = 0; i < elements.length; i++) {
      if (i >= u.length) {
        if (elements[i]!.optional) continue
        return false
      }
      if (!elements[i]!.check(u[i])) return false
    }
    if (rest === undefined) return u.length <= elements.length
    for (let i = elements.length; i < u.length; i++) if (!rest(u[i])) return false
    return true
  }
}

const compileAst = (ast: AST.AST, memo: Map<AST.AST, Guard>): Guard => {
  const known = memo.get(ast)
  if (known) return known
  const compile = (a: AST.AST) => compileAst(a, memo)
  let guard: Guard
  switch (ast._tag) {
    case "UnknownKeyword":
    case "AnyKeyword":
      guard = () => true
      break
    case "StringKeyword":
      guard = (u) => typeof u === "string"
      break
    case "NumberKeyword":
      guard = (u) => typeof u === "number"
      break
    case "BooleanKeyword":
      guard = (u) => typeof u === "boolean"
      break
    case "UndefinedKeyword":
    case "VoidKeyword":
      guard = (u) => u === undefined
      break
    case "Literal": {
      const literal = ast.literal
      guard = (u) => u === literal
      break
    }
    case "Union": {
      const members = ast.types.map(compile)
      guard = (u) => members.some((m) => m(u))
      break
    }
    case "Refinement": {
      const from = compile(ast.from)
      const refinement = ast
      guard = (u) => from(u) && Option.isNone(refinement.filter(u, OPTIONS, refinement))
      break
    }
    case "TypeLiteral":
      guard = typeLiteral(ast, compile)
      break
    case "TupleType":
      guard = tupleType(ast, compile)
      break
    case "Suspend": {
      // The suspended schema may refer back to this one: its guard is known before it is compiled.
      let inner: Guard = () => false
      guard = (u) => inner(u)
      memo.set(ast, guard)
      inner = compile(ast.f())
      break
    }
    case "Declaration": {
      if (ast.annotations[ChecksByParameter] !== true || ast.typeParameters.length !== 1) throw new Unsupported()
      guard = compile(ast.typeParameters[0]!)
      break
    }
    default:
      throw new Unsupported()
  }
  memo.set(ast, guard)
  return guard
}

/** The schema's check as a predicate, or `undefined` when its AST has a node this does not compile. */
export const guard = (schema: Schema.Schema<any, any, never>): Guard | undefined => {
  try {
    return compileAst(schema.ast, new Map())
  } catch (e) {
    if (e instanceof Unsupported) return undefined
    throw e
  }
}

/**
 * `Schema.decodeUnknownEither(schema)` for a request body, with the decoder's copy spared for a
 * value the guard accepts: that value is answered as it is. Sound only for a schema with no
 * transformation (`guard` compiles no other) and whose unions' members refuse excess properties
 * (`onExcessProperty: "error"` in their annotations), so that the value the guard accepts is the
 * value the decoder gives: test/http/GuardedDecode.test.ts checks the routes' schemas. Any value
 * the guard refuses goes to the decoder, which accepts (stripping excess properties) or explains.
 */
export const guardedDecode = <A, I>(schema: Schema.Schema<A, I, never>): (u: unknown) => Either.Either<A, ParseResult.ParseError> => {
  const decode = SchemaModule.decodeUnknownEither(schema)
  const check = guard(schema)
  return check === undefined ? decode : (u) => (check(u) ? Either.right(u as A) : decode(u))
}
