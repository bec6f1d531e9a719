/**
 * The product runs as one bundled module (scripts/bundle.js: dist/brain.mjs, which bin/brain.js
 * imports), while its worker threads load their compiled modules from dist/. The places the code
 * resolves files from (DIST_ROOT, src/DistRoot.ts) all exist; and the bundled server, with every
 * activation sent to a guest thread, answers concurrent turns on many sessions — a guest thread
 * or the sync thread that could not find its module would fail them.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { WORKER_URL as SYNC_WORKER } from "../../src/layers/journal/SyncThread.js"
import { WORKER_URL as INSTRUMENT_WORKER } from "../../src/layers/wasm/InlineModules.js"
import { WORKER_URL as GUEST_WORKER } from "../../src/layers/wasm/Pool.js"
import { OFFICIAL_WASM } from "../../src/main.js"
import { ensureBuilt, request, ROOT, ServerProcess } from "../support/server.js"

describe("the bundled product", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = new ServerProcess({ entry: "product", env: { BRAIN_WASM_INLINE_MS: "0" } })
    await server.start()
  }, 180_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("every file the server resolves from the build's root exists: the three worker modules and the official loop", () => {
    for (const url of [SYNC_WORKER, GUEST_WORKER, INSTRUMENT_WORKER, OFFICIAL_WASM]) {
      expect(fs.existsSync(fileURLToPath(url)), url.href).toBe(true)
      expect(fileURLToPath(url).startsWith(path.join(ROOT, "dist") + path.sep), url.href).toBe(true)
    }
  })

  it("bin/brain.js runs the bundle, and the bundled server answers eight sessions' turns at once on guest threads", async () => {
    expect(fs.readFileSync(path.join(ROOT, "bin/brain.js"), "utf8")).toContain('import("../dist/brain.mjs")')
    const ids = await Promise.all(Array.from({ length: 8 }, async () => {
      const created = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
      expect(created.status, created.text).toBe(201)
      return created.body.session_id as string
    }))
    for (let round = 0; round < 2; round++) {
      const answers = await Promise.all(ids.map((id) => request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: `hello ${round}` } } })))
      for (const a of answers) {
        expect(a.status, a.text).toBe(200)
        expect(a.body.turn.status, a.text).toBe("ended")
      }
    }
  })
})
