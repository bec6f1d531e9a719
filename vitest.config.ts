import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    reporters: ["default", "./test/support/SummaryReporter.ts"],
    // Hang guards, not timing claims: a test that takes longer on a loaded 2-core machine says so
    // itself. A hook's covers a server start (test/support/server.ts allows it 90 s).
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    poolOptions: { forks: { maxForks: 2, minForks: 1 } }
  }
})
