// The page in headless Chromium: serves a WebAssembly build's web folder on localhost, draws the
// committed strokes (wasm/tests/strokes.json) on the pad with mouse events through the DevTools
// protocol (the page's own pointer handlers draw them), and checks the label the page shows for
// each; the last one is saved as a screenshot, taken while the label element shows the expected digit.
//   node chromium_test.js <web folder> <screenshot.png>     (EMBER_CHROMIUM: the browser, default chromium)
"use strict";
const fs = require("fs");
const http = require("http");
const os = require("os");
const path = require("path");
const { spawn } = require("child_process");

const [web, screenshotPath] = process.argv.slice(2);
const strokes = JSON.parse(fs.readFileSync(path.join(__dirname, "strokes.json"), "utf8"));
const kTypes = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".wasm": "application/wasm" };

function serve(folder) {
  const server = http.createServer((request, response) => {
    const name = path.basename(decodeURIComponent(new URL(request.url, "http://localhost").pathname)) || "index.html";
    fs.readFile(path.join(folder, name), (error, data) => {
      if (error) {
        response.writeHead(404);
        response.end();
        return;
      }
      response.writeHead(200, { "Content-Type": kTypes[path.extname(name)] || "application/octet-stream" });
      response.end(data);
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

// The DevTools protocol over --remote-debugging-pipe: JSON messages ending in a NUL byte, written
// to the browser's fd 3 and read from its fd 4.
class DevTools {
  constructor(browser) {
    this.next = 1;
    this.waiting = new Map();
    this.buffer = "";
    this.input = browser.stdio[3];
    browser.stdio[4].on("data", (chunk) => {
      this.buffer += chunk.toString("utf8");
      let end;
      while ((end = this.buffer.indexOf("\0")) >= 0) {
        const message = JSON.parse(this.buffer.slice(0, end));
        this.buffer = this.buffer.slice(end + 1);
        const pending = this.waiting.get(message.id);
        if (pending === undefined) continue;
        this.waiting.delete(message.id);
        if (message.error) pending.reject(new Error(`${pending.method}: ${message.error.message}`));
        else pending.resolve(message.result);
      }
    });
  }
  send(method, params = {}, sessionId = undefined) {
    const id = this.next++;
    this.input.write(JSON.stringify({ id, method, params, sessionId }) + "\0");
    return new Promise((resolve, reject) => this.waiting.set(id, { resolve, reject, method }));
  }
}

let browserLog = "";
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  const server = await serve(web);
  const url = `http://127.0.0.1:${server.address().port}/index.html`;
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "ember-chromium-"));
  const browser = spawn(process.env.EMBER_CHROMIUM || "chromium",
    ["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", `--user-data-dir=${profile}`,
     "--window-size=900,720", "--hide-scrollbars", "about:blank"],
    { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"] });
  browser.stdio[2].on("data", (chunk) => { browserLog += chunk; });
  const cdp = new DevTools(browser);
  try {
    const { targetId } = await cdp.send("Target.createTarget", { url: "about:blank" });
    const { sessionId } = await cdp.send("Target.attachToTarget", { targetId, flatten: true });
    const page = (method, params) => cdp.send(method, params, sessionId);
    const evaluate = async (expression) => (await page("Runtime.evaluate", { expression, returnByValue: true })).result.value;
    await page("Emulation.setDeviceMetricsOverride", { width: 900, height: 720, deviceScaleFactor: 1, mobile: false });
    await page("Page.navigate", { url });

    const until = async (what, condition, seconds = 60) => {
      for (let start = Date.now(); Date.now() - start < seconds * 1000; await sleep(50)) {
        const value = await evaluate(condition);
        if (value) return value;
      }
      throw new Error(`timed out waiting for ${what}; page status: ${await evaluate("document.getElementById('status').textContent")}`);
    };
    await until("the model to load", "document.body.dataset.state === 'ready' || document.body.dataset.state === 'error'");
    const state = await evaluate("document.body.dataset.state + ': ' + document.getElementById('status').textContent");
    console.log(`page ${state}`);
    if (!state.startsWith("ready")) throw new Error(`the page did not start: ${state}`);
    const box = JSON.parse(await evaluate("JSON.stringify(document.getElementById('pad').getBoundingClientRect())"));
    const clear = JSON.parse(await evaluate("JSON.stringify(document.getElementById('clear').getBoundingClientRect())"));

    const mouse = (type, x, y, buttons) => page("Input.dispatchMouseEvent",
      { type, x, y, button: "left", buttons, clickCount: type === "mouseMoved" ? 0 : 1 });
    let failures = 0;
    for (const [digit, lines] of Object.entries(strokes)) {
      await mouse("mousePressed", clear.x + clear.width / 2, clear.y + clear.height / 2, 1);
      await mouse("mouseReleased", clear.x + clear.width / 2, clear.y + clear.height / 2, 0);
      const before = Number(await evaluate("document.body.dataset.readings || 0"));
      for (const line of lines) {
        // Each line of the stroke in steps of at most 8 pixels, as a hand would move.
        const [x0, y0] = line[0];
        await mouse("mousePressed", box.x + x0, box.y + y0, 1);
        for (let i = 1; i < line.length; ++i) {
          const [ax, ay] = line[i - 1], [bx, by] = line[i];
          const steps = Math.max(1, Math.ceil(Math.hypot(bx - ax, by - ay) / 8));
          for (let s = 1; s <= steps; ++s) {
            await mouse("mouseMoved", box.x + ax + (bx - ax) * s / steps, box.y + ay + (by - ay) * s / steps, 1);
          }
        }
        const [xn, yn] = line[line.length - 1];
        await mouse("mouseReleased", box.x + xn, box.y + yn, 0);
      }
      // The reading after the last release.
      await sleep(200);
      const readings = Number(await until("a reading", `Number(document.body.dataset.readings || 0) > ${before} && document.body.dataset.readings`));
      const shown = await evaluate("document.getElementById('label').dataset.label");
      const bars = await evaluate("[...document.querySelectorAll('#bars .value')].map(e => e.textContent).join(' ')");
      console.log(`drew ${digit}: the page reads ${shown} (${readings - before} readings while drawing; ${bars})`);
      if (shown !== digit) {
        ++failures;
        console.log(`FAIL the page read the drawn ${digit} as ${shown}`);
      }
    }
    console.log(await evaluate("document.getElementById('timing').textContent"));

    // The screenshot of the last digit, with the label element checked as it is shown.
    const last = Object.keys(strokes).pop();
    const visible = await evaluate(`(() => { const l = document.getElementById('label'); const r = l.getBoundingClientRect();
      return l.textContent === '${last}' && r.width > 0 && r.height > 0 && getComputedStyle(l).visibility === 'visible'; })()`);
    const { data } = await page("Page.captureScreenshot", { format: "png" });
    fs.writeFileSync(screenshotPath, Buffer.from(data, "base64"));
    console.log(`screenshot: ${screenshotPath} (${Buffer.from(data, "base64").length} bytes), label ${last} shown: ${visible}`);
    if (!visible) {
      ++failures;
      console.log(`FAIL the label ${last} is not shown when the screenshot is taken`);
    }
    if (failures > 0) throw new Error(`${failures} failure(s)`);
    console.log("the page read every drawn digit");
  } finally {
    const exited = new Promise((resolve) => browser.once("exit", resolve));
    cdp.send("Browser.close").catch(() => {});
    await Promise.race([exited, sleep(5000)]);
    browser.kill("SIGKILL");
    await Promise.race([exited, sleep(2000)]);
    server.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

main().catch((error) => {
  console.log("FAIL " + error.message);
  if (browserLog) console.log("the browser's log ends:\n" + browserLog.slice(-2000));
  process.exitCode = 1;
});
