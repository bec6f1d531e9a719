/**
 * What the OpenAPI document says beyond the routes' schemas: who may call a route, what the
 * listener answers before any route is chosen, the SSE form of a session's Events, a module
 * upload's body, the Idempotency-Key the host routes check, and the response headers the contract
 * names (docs/api.md). Each is a transform of the generated document (`OpenApi.Transform`), never
 * a schema a route decodes: nothing here is read while a request is served, so the routes that
 * matter most (sends, Events) do no more work for it.
 *
 * Why not the contract itself: bearer auth as an `HttpApiSecurity` middleware would run on every
 * request (the gate checks the token already, Middleware.ts); a `Last-Event-ID` or host
 * `Idempotency-Key` header schema would be decoded on every request to those routes and would make
 * the headers a required argument in every typed client; the module upload reads its bytes itself
 * (Handlers.ts); and what the listener answers (Connections.ts) belongs to no route.
 */
import * as OpenApiJsonSchema from "@effect/platform/OpenApiJsonSchema"
import * as E from "./ApiErrors.js"

/** The document, or one of its operations, as the generator builds it (plain JSON). */
type Json = Record<string, any>

const schemaRef = (name: string) => ({ $ref: `#/components/schemas/${name}` })

/**
 * Each error status of the document says which codes it carries: the generator describes a status
 * by its first schema only, while the schemas under it (one per code) are listed in its `anyOf`.
 */
const describeErrorStatuses = (spec: Json): void => {
  const schemas: Json = spec.components?.schemas ?? {}
  const codeOf = (ref: unknown) =>
    typeof ref === "string" ? schemas[ref.replace("#/components/schemas/", "")]?.properties?.code?.enum?.[0] : undefined
  for (const operation of operationsOf(spec)) {
    for (const [status, response] of Object.entries<Json>(operation.responses ?? {})) {
      if (Number(status) < 400) continue
      const schema = response.content?.["application/json"]?.schema
      const refs: Array<unknown> = schema?.anyOf?.map((s: { $ref?: string }) => s.$ref) ?? [schema?.$ref]
      const codes = refs.map(codeOf).filter((c): c is string => typeof c === "string")
      if (codes.length > 0) response.description = `code ${codes.map((c) => `\`${c}\``).join(", ")}`
    }
  }
}

const operationsOf = (spec: Json): Array<Json> => Object.values<Json>(spec.paths ?? {}).flatMap((operations) => Object.values<Json>(operations))

/** The bearer schemes (docs/api.md, Auth). */
const SECURITY_SCHEMES = {
  bearer: {
    type: "http",
    scheme: "bearer",
    description:
      "The server's API token (BRAIN_API_TOKEN), on every route but /health/* and a host's own routes. A server started without one listens on loopback only and asks for none."
  },
  hostToken: {
    type: "http",
    scheme: "bearer",
    description:
      "A host's own token, answered once by POST /v1/hosts: its removal, command stream, results and Events take it instead of the API token, whether or not the server has one."
  }
} as const

/** The routes a host calls with its own token: `/v1/hosts/{id}` and the paths under it. */
const HOST_OWN = /^\/v1\/hosts\/\{id\}/

/** Each operation's scheme: none on health, the host's token on its own routes, the API token elsewhere. */
const declareSecurity = (spec: Json): void => {
  spec.components.securitySchemes = { ...spec.components.securitySchemes, ...SECURITY_SCHEMES }
  spec.security = [{ bearer: [] }]
  for (const [path, operations] of Object.entries<Json>(spec.paths)) {
    for (const operation of Object.values<Json>(operations)) {
      operation.security = path.startsWith("/health/") ? [] : [{ [HOST_OWN.test(path) ? "hostToken" : "bearer"]: [] }]
    }
  }
}

/**
 * What the listener and the gate answer any request before it is routed (Connections.ts,
 * Middleware.ts), each an `invalid_request`. A route whose contract lists 400 already keeps its
 * own (the health routes list none: they read no input, so their 400 is only this one).
 */
const LISTENER_STATUSES: ReadonlyArray<readonly [string, string]> = [
  ["400", "code `invalid_request`: a request Node cannot parse (the connection closed), or an HTTP/1.1 request without Host"],
  ["408", "code `invalid_request` (`retryable: true`, the connection closed): the request's headers did not arrive within BRAIN_HEADERS_TIMEOUT_MS, or its body within BRAIN_REQUEST_TIMEOUT_MS of its first byte"],
  ["417", "code `invalid_request` (the connection closed): an `Expect` other than `100-continue`"],
  ["431", "code `invalid_request` (the connection closed): the request's headers are above 16 KiB in all"]
]

/** Headers of refusals, by status (Errors.ts, `refusalHeaders`). */
const REFUSAL_HEADERS: Readonly<Record<string, Json>> = {
  "401": {
    "WWW-Authenticate": { description: "`Bearer realm=\"brain\"`", required: true, schema: { type: "string" } }
  },
  "503": {
    "Retry-After": {
      description: "Whole seconds to wait before a retry: on every `overloaded` with `retryable: true` (its `details.retry_after_ms` rounded up, else 1), on no other answer",
      required: false,
      schema: { type: "integer", minimum: 0 }
    }
  }
}

const declareRefusals = (spec: Json): void => {
  for (const operation of operationsOf(spec)) {
    for (const [status, description] of LISTENER_STATUSES) {
      operation.responses[status] ??= { description, content: { "application/json": { schema: schemaRef("InvalidRequest") } } }
    }
    for (const [status, headers] of Object.entries(REFUSAL_HEADERS)) {
      const response = operation.responses[status]
      if (response !== undefined) response.headers = { ...response.headers, ...headers }
    }
  }
  // A 405 answers a method that a path does not take: no operation (a method and a path) can list it.
  const methodNotAllowed = OpenApiJsonSchema.makeWithDefs(E.MethodNotAllowed, {
    defs: spec.components.schemas,
    additionalPropertiesStrategy: "strict"
  })
  spec.components.responses = {
    ...spec.components.responses,
    MethodNotAllowed: {
      description:
        "code `method_not_allowed`: a path the API has, with a method it does not take (no operation lists it: an operation is a method and a path); answered after the token is checked and before the body is read",
      headers: {
        Allow: { description: "the methods the path takes (HEAD wherever GET is)", required: true, schema: { type: "string" } }
      },
      content: { "application/json": { schema: methodNotAllowed } }
    }
  }
}

/** Completes the generated document (the API's own `OpenApi.Transform`). */
export const completeDocument = (spec: Json): Json => {
  describeErrorStatuses(spec)
  declareSecurity(spec)
  declareRefusals(spec)
  return spec
}

// ---------------------------------------------------------------------------------------------
// Routes' own (each endpoint's `OpenApi.Transform`)

/** The Events route's other form: an SSE stream, chosen by `Accept`, resumed by `Last-Event-ID`. */
export const eventStream = (operation: Json): Json => ({
  ...operation,
  parameters: [
    ...(operation.parameters ?? []),
    {
      name: "Last-Event-ID",
      in: "header",
      required: false,
      description: "SSE only: the sequence of the last Event received; the stream resumes after it or `after`, whichever is further",
      schema: { type: "string", pattern: "^\\d{1,15}$" }
    }
  ],
  responses: {
    ...operation.responses,
    "200": {
      ...operation.responses["200"],
      content: {
        ...operation.responses["200"]?.content,
        "text/event-stream": {
          schema: {
            type: "string",
            description:
              "With `Accept: text/event-stream`: frames `id: <sequence>`, `event: <kind>`, `data: <the Event>`; control frames `stream_lagged` and `stream_error` and live `model_delta` frames without `id`; `: heartbeat` comments"
          }
        }
      }
    },
    "204": {
      description:
        "SSE only: the session is over (ended, or its creation failed) and the cursor (`after` or Last-Event-ID, whichever is further) is at its last record: nothing more will be sent, and an EventSource stops reconnecting"
    }
  }
})

/** A module upload's body: the module's bytes, which the handler reads itself. */
export const moduleBody = (operation: Json): Json => ({
  ...operation,
  requestBody: {
    required: true,
    description: "The module's bytes (docs/abi.md)",
    content: { "application/wasm": { schema: { type: "string", format: "binary" } } }
  }
})

/** A host route's `Idempotency-Key`, which its handler checks and then ignores (Handlers.ts, `checkedKey`). */
export const checkedKeyHeader = (operation: Json): Json => ({
  ...operation,
  parameters: [
    ...(operation.parameters ?? []),
    {
      name: "idempotency-key",
      in: "header",
      required: false,
      description: "Checked as on every mutating route (1 to 256 bytes of printable ASCII, else 400) and otherwise ignored",
      schema: { type: "string" }
    }
  ]
})

/** A submit's `Preference-Applied` (RFC 7240). */
export const preferenceApplied = (operation: Json): Json => ({
  ...operation,
  responses: {
    ...operation.responses,
    "202": {
      ...operation.responses["202"],
      headers: { "Preference-Applied": { description: "`respond-async`", required: true, schema: { type: "string" } } }
    }
  }
})
