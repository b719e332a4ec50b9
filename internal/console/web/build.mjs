// Bundles the console into ../dist, which zeishd embeds (internal/console).
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readdirSync, rmSync } from "node:fs";

const out = new URL("../dist/", import.meta.url).pathname;
for (const f of readdirSync(out)) if (f !== "README") rmSync(out + f, { recursive: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: ["src/main.ts"],
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  outfile: out + "app.js",
  legalComments: "none",
});
copyFileSync("static/index.html", out + "index.html");
copyFileSync("static/app.css", out + "app.css");
copyFileSync("node_modules/@xterm/xterm/css/xterm.css", out + "xterm.css");
console.log("console built into", out);
