/**
 * `brain/sdk`'s declarations as a TypeScript application's compiler reads them (strict, lib checks
 * on): an application using the Promise client, host tools, the Effect client and the generated
 * HttpApiClient (test/fixtures/sdk-app/app.ts) type-checks with and without
 * exactOptionalPropertyTypes, which Brain itself compiles with.
 */
import { execFile, execSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { promisify } from "node:util"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { ROOT } from "../support/server.js"

const run = promisify(execFile)
const TSC = path.join(ROOT, "node_modules/typescript/bin/tsc")
const APP = path.join(ROOT, "test/fixtures/sdk-app")
/** `tsc -p <project>`: its exit code and what it printed. */
const typecheck = (project: string) =>
  run(process.execPath, [TSC, "-p", path.join(APP, project)], { cwd: ROOT }).then(
    ({ stdout }) => ({ code: 0, out: stdout }),
    (e: { code: number; stdout: string }) => ({ code: e.code, out: e.stdout })
  )

describe("brain/sdk's type declarations", () => {
  beforeAll(() => {
    if (!fs.existsSync(path.join(ROOT, "dist/sdk/index.d.ts"))) execSync("npm run build", { cwd: ROOT, stdio: "inherit" })
  }, 180_000)

  it("an application type-checks against them with and without exactOptionalPropertyTypes", async () => {
    for (const project of ["tsconfig.json", "tsconfig.exact.json"]) {
      const { code, out } = await typecheck(project)
      expect(out, project).toBe("")
      expect(code, project).toBe(0)
    }
    // Two whole type checks of Effect's types: about 15 s each on a quiet 2-core machine.
  }, 300_000)
})
