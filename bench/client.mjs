// The load client: many visitors on one Node.js process, so that the client
// is not what limits the server (it reports its own CPU to prove it).
//
// Each visitor gets a session from GET /, opens the chat socket and asks
// questions back to back. A fraction of turns is stopped after a few deltas.
// Only turns that start inside the measuring window count for the latencies
// and the characters of a turn; windowChars counts every character that
// arrives inside the window, for the CPU per character. Run by
// bench/concurrency.py; reads its settings as JSON from argv[2]:
//   {addresses: ["127.0.0.1:8000", ...], path: "/ws/chat/", visitors, questions,
//    rampSeconds, warmupSeconds, seconds, stopFraction, forwardedFor}
// Prints "window start" and "window end" lines as the window opens and
// closes, then one line of JSON with the results.

const config = JSON.parse(process.argv[2]);
const started = performance.now();
const windowStart = started + (config.rampSeconds + config.warmupSeconds) * 1000;
const windowEnd = windowStart + config.seconds * 1000;
const TIMEOUT_MS = 60_000;

const results = {
  turns: 0,
  completed: 0,
  stopped: 0,
  firstDelta: [],
  // The running turns' pace: the time between two deltas of an answer (the
  // provider sends one every 1/tokensPerSecond).
  gaps: [],
  // From a search's end to the answer's first delta (the next round's TTFT
  // and the server's work between rounds).
  afterTool: [],
  chars: 0,
  frames: 0,
  // Every character that arrived inside the window, whenever its turn began:
  // the server's CPU in the window is spent on exactly these (turns of a
  // few seconds straddle the window's edges; counting by when a turn began
  // would add or miss a few seconds of streaming at each edge).
  windowChars: 0,
  windowFrames: 0,
  errors: {},
  stops: [],
  openSockets: 0,
  refused: 0, // sockets a saturated server refused (4503): retried as the page does
};
const BUSY = 4503;

function error(kind) {
  results.errors[kind] = (results.errors[kind] || 0) + 1;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function session(address, forwardedFor) {
  const response = await fetch(`http://${address}/`, {
    headers: { "X-Forwarded-Proto": "https", "X-Forwarded-For": forwardedFor },
    redirect: "manual",
  });
  const cookies = response.headers.getSetCookie().map((c) => c.split(";")[0]);
  await response.arrayBuffer();
  // __Host-sessionid as production names it; sessionid under DEBUG.
  const cookie = cookies.find((c) => c.startsWith("sessionid=") || c.startsWith("__Host-sessionid="));
  if (!cookie) throw new Error(`no session from GET / (${response.status})`);
  return cookie;
}

function open(address, cookie, forwardedFor) {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(`ws://${address}${config.path}`, {
      headers: { Cookie: cookie, Origin: `https://${address.split(":")[0]}`, "X-Forwarded-For": forwardedFor },
    });
    socket.onopen = () => resolve(socket);
    socket.onerror = () => reject(new Error("socket error"));
  });
}

// Frames of one socket, awaited one at a time.
function inbox(socket) {
  const queue = [];
  let waiting = null;
  const deliver = (item) => {
    if (!waiting) return queue.push(item);
    const { resolve, timer } = waiting;
    waiting = null;
    clearTimeout(timer);
    resolve(item);
  };
  socket.onmessage = (event) => deliver({ frame: JSON.parse(event.data), arrived: performance.now() });
  socket.onclose = (event) => deliver({ closed: event.code });
  return () =>
    queue.length
      ? Promise.resolve(queue.shift())
      : new Promise((resolve, reject) => {
          waiting = { resolve, timer: setTimeout(() => reject(new Error("timeout")), TIMEOUT_MS) };
        });
}

async function connect(address, forwardedFor, cookie = null) {
  // A page that reconnects keeps its session: only a new visitor asks GET / for one.
  cookie = cookie || (await session(address, forwardedFor));
  const socket = await open(address, cookie, forwardedFor);
  return [socket, inbox(socket), cookie];
}

async function visitor(number) {
  const address = config.addresses[number % config.addresses.length];
  const forwardedFor = `10.${(number >> 16) & 255}.${(number >> 8) & 255}.${number & 255}`;
  await sleep((config.rampSeconds * 1000 * number) / config.visitors);
  let socket, next, cookie;
  try {
    [socket, next, cookie] = await connect(address, forwardedFor);
  } catch (e) {
    error(`connect: ${e.message}`);
    return;
  }
  results.openSockets++;
  let asked = 0;
  let refusals = 0;
  while (performance.now() < windowEnd) {
    const question = config.questions[(number + asked) % config.questions.length];
    const marker = `k${number}x${asked}`;
    const sentAt = performance.now();
    const counted = sentAt >= windowStart && sentAt < windowEnd;
    const stopAfter = Math.random() < config.stopFraction ? 2 + Math.floor(Math.random() * 6) : 0;
    socket.send(JSON.stringify({ type: "message", text: `${question} ${marker}` }));
    let deltas = 0;
    let first = null;
    let last = null;
    const gaps = [];
    const afterTool = [];
    let toolEnded = null;
    let chars = 0;
    let frames = 0;
    try {
      for (;;) {
        const item = await next();
        if (item.closed === BUSY) {
          // Saturated: back off as the page does (2 s doubling to 30 s, jittered), then ask again.
          results.refused++;
          results.openSockets--;
          await sleep(Math.min(30000, 2000 * 2 ** refusals++) * (0.75 + Math.random() / 2));
          [socket, next] = await connect(address, forwardedFor, cookie);
          results.openSockets++;
          break;
        }
        if (item.closed !== undefined) throw new Error(`closed ${item.closed}`);
        refusals = 0;
        const frame = item.frame;
        frames++;
        const inWindow = item.arrived >= windowStart && item.arrived < windowEnd;
        if (inWindow) results.windowFrames++;
        if (frame.type === "error") throw new Error(`error frame ${frame.code}`);
        if (frame.type === "delta") {
          deltas++;
          chars += frame.text.length;
          if (inWindow) results.windowChars += frame.text.length;
          if (first === null) first = item.arrived - sentAt;
          else if (last !== null) gaps.push(item.arrived - last);
          if (toolEnded !== null) afterTool.push(item.arrived - toolEnded);
          toolEnded = null;
          last = item.arrived;
          if (deltas === stopAfter) {
            if (counted) results.stops.push({ marker, sentAt: performance.timeOrigin + performance.now() });
            socket.send(JSON.stringify({ type: "stop" }));
          }
        } else if (frame.type === "tool") {
          // A round ended: the next delta starts another round's stream.
          last = null;
          if (frame.status !== "started") toolEnded = item.arrived;
        } else if (frame.type === "turn.ended") {
          asked++;
          if (counted) {
            results.turns++;
            results[frame.status === "interrupted" ? "stopped" : "completed"]++;
            if (first !== null) results.firstDelta.push(first);
            results.gaps.push(...gaps);
            results.afterTool.push(...afterTool);
            results.chars += chars;
            results.frames += frames;
          }
          break;
        }
      }
    } catch (e) {
      error(e.message);
      break;
    }
    if (config.pauseSeconds) {
      // A visitor who reads the answer and types the next question: a pause
      // of pauseSeconds on average (half to one and a half times it).
      await sleep(config.pauseSeconds * 1000 * (0.5 + Math.random()));
    }
  }
  socket.close();
}

const cpuBefore = { value: null };
setTimeout(() => {
  cpuBefore.value = process.cpuUsage();
  console.log("window start");
}, windowStart - started);
let cpu = null;
setTimeout(() => {
  cpu = process.cpuUsage(cpuBefore.value);
  console.log("window end");
}, windowEnd - started);

await Promise.all(Array.from({ length: config.visitors }, (_, n) => visitor(n)));
results.clientCpuSeconds = cpu ? (cpu.user + cpu.system) / 1e6 : null;
results.firstDelta.sort((a, b) => a - b);
results.gaps.sort((a, b) => a - b);
results.afterTool.sort((a, b) => a - b);
console.log(JSON.stringify(results));
