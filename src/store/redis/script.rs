//! The three Lua scripts (GCRA, token bucket, sliding-window counter), their arguments and
//! their reply.
//!
//! Each script is one atomic decision on one key: it reads Redis' `TIME` in integer
//! microseconds (never the client's clock), applies the same step as the local limiter of its
//! kind, writes nothing on a refusal, and on an admission writes the key with a TTL equal to the
//! time until the key would be full again, rounded up to the millisecond (an absent key reads as
//! full, so expiry loses nothing). Arguments: `ARGV[1]` = `n`, `ARGV[2]` = the most to take
//! (`n` without leases, the lease size with), then the limit's figures in microseconds. Reply:
//! `{granted, retry_after_us, now_us, valid_us}`; `granted = 0` is a refusal, `valid_us > 0` the
//! time left in the window the grant was booked in (sliding window only).
//!
//! Lua numbers are doubles: every integer the scripts form stays below 2^53 under the bounds
//! [`RedisLimitConfig`](super::RedisLimitConfig) validates, and divisions go through `fdiv`,
//! which corrects the rounding of `a / b`, so the arithmetic is exact.

use redis::Script;

use super::config::Micros;

/// Shared by the three scripts: time from Redis, exact integer division, the request.
const PRELUDE: &str = r#"
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function cdiv(a, b) return fdiv(a + b - 1, b) end
"#;

/// GCRA: the key holds the theoretical arrival time (µs). `ARGV[3]` = T, `ARGV[4]` = burst.
const GCRA: &str = r#"
local T = tonumber(ARGV[3])
local burst = tonumber(ARGV[4])
local window = burst * T
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local avail = fdiv(now + window - tat, T)
if avail < n then
  return {0, tat + n * T - window - now, now, 0}
end
local g = math.min(want, avail)
local after = tat + g * T
redis.call('SET', KEYS[1], string.format('%d', after), 'PX', cdiv(after - now, 1000))
return {g, 0, now, 0}
"#;

/// Token bucket: the key is a hash of the credit (in 1/per_us of a token) and the time it was
/// counted. `ARGV[3]` = capacity, `ARGV[4]` = refill, `ARGV[5]` = per (µs).
const TOKEN_BUCKET: &str = r#"
local capacity = tonumber(ARGV[3])
local refill = tonumber(ARGV[4])
local per = tonumber(ARGV[5])
local full = capacity * per
local s = redis.call('HMGET', KEYS[1], 'c', 't')
local credit = full
local at = now
if s[1] then
  credit = tonumber(s[1])
  at = tonumber(s[2])
  local elapsed = now - at
  if elapsed < 0 then elapsed = 0 end
  local add = elapsed * refill
  if add >= full - credit then credit = full else credit = credit + add end
  if at < now then at = now end
end
local need = n * per
if credit < need then
  return {0, cdiv(need - credit, refill), now, 0}
end
local g = math.min(want, fdiv(credit, per))
credit = credit - g * per
redis.call('HSET', KEYS[1], 'c', string.format('%d', credit), 't', string.format('%d', at))
redis.call('PEXPIRE', KEYS[1], cdiv(at - now + cdiv(full - credit, refill), 1000))
return {g, 0, now, 0}
"#;

/// Sliding-window counter: the key is a hash of the window's index, the previous window's count
/// and the current one's. `ARGV[3]` = limit, `ARGV[4]` = window (µs).
const SLIDING_WINDOW: &str = r#"
local limit = tonumber(ARGV[3])
local w = tonumber(ARGV[4])
local idx = fdiv(now, w)
local s = redis.call('HMGET', KEYS[1], 'i', 'p', 'c')
local index, prev, cur, e = idx, 0, 0, now - idx * w
if s[1] then
  local si = tonumber(s[1])
  if idx < si then
    index, prev, cur, e = si, tonumber(s[2]), tonumber(s[3]), 0
  elseif idx == si then
    prev, cur = tonumber(s[2]), tonumber(s[3])
  elseif idx == si + 1 then
    prev = tonumber(s[3])
  end
end
-- floor(room * w / prev) without forming room * w (room < prev)
local function keep(room, p)
  if room >= p then return w end
  local q = fdiv(w, p)
  return room * q + fdiv(room * (w - q * p), p)
end
-- prev * (w - e) + total * w <= limit * w
local function fits(p, total, off)
  local room = limit - total
  if room < 0 then return false end
  if p == 0 then return true end
  return keep(room, p) >= w - off
end
-- the earliest offset into a window with counts p, c at which n fits
local function earliest(p, c)
  local room = limit - c - n
  if room < 0 then return nil end
  if p == 0 then return 0 end
  local at = w - math.min(keep(room, p), w)
  if at < w then return at end
  return nil
end
if not fits(prev, cur + n, e) then
  local start = index * w
  local at = earliest(prev, cur)
  if at then at = start + at else at = start + w + (earliest(cur, 0) or w) end
  return {0, math.max(at - now, 1), now, 0}
end
local lo, hi = n, want
while lo < hi do
  local mid = lo + fdiv(hi - lo + 1, 2)
  if fits(prev, cur + mid, e) then lo = mid else hi = mid - 1 end
end
cur = cur + lo
redis.call('HSET', KEYS[1], 'i', string.format('%d', index), 'p', string.format('%d', prev), 'c', string.format('%d', cur))
redis.call('PEXPIRE', KEYS[1], cdiv((index + 2) * w - now, 1000))
return {lo, 0, now, (index + 1) * w - now}
"#;

/// The three scripts, built once per store (hashing a script is not free).
#[derive(Debug)]
pub(crate) struct Scripts {
    gcra: Script,
    token_bucket: Script,
    sliding_window: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            gcra: Script::new(&format!("{PRELUDE}{GCRA}")),
            token_bucket: Script::new(&format!("{PRELUDE}{TOKEN_BUCKET}")),
            sliding_window: Script::new(&format!("{PRELUDE}{SLIDING_WINDOW}")),
        }
    }

    /// The script of `micros`' algorithm.
    pub(crate) fn of(&self, micros: &Micros) -> &Script {
        match micros {
            Micros::Gcra { .. } => &self.gcra,
            Micros::TokenBucket { .. } => &self.token_bucket,
            Micros::SlidingWindow { .. } => &self.sliding_window,
        }
    }

    /// The invocation of the decision "take at least `n`, at most `want`" on `key`.
    pub(crate) fn invocation<'a>(
        &'a self,
        micros: &Micros,
        key: &str,
        n: u64,
        want: u64,
    ) -> redis::ScriptInvocation<'a> {
        let mut inv = self.of(micros).key(key);
        inv.arg(n).arg(want.max(n));
        match *micros {
            Micros::Gcra { interval, burst } => inv.arg(interval).arg(burst),
            Micros::TokenBucket {
                capacity,
                refill,
                per,
            } => inv.arg(capacity).arg(refill).arg(per),
            Micros::SlidingWindow { limit, window } => inv.arg(limit).arg(window),
        };
        inv
    }
}

/// The source of `micros`' script and its arguments for "at least `n`, at most `want`".
pub(crate) fn source_and_args(micros: &Micros, n: u64, want: u64) -> (String, Vec<u64>) {
    let (body, figures) = match *micros {
        Micros::Gcra { interval, burst } => (GCRA, vec![interval, burst]),
        Micros::TokenBucket {
            capacity,
            refill,
            per,
        } => (TOKEN_BUCKET, vec![capacity, refill, per]),
        Micros::SlidingWindow { limit, window } => (SLIDING_WINDOW, vec![limit, window]),
    };
    let mut args = vec![n, want.max(n)];
    args.extend(figures);
    (format!("{PRELUDE}{body}"), args)
}

/// One decision taken in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// How many were taken: 0 for a refusal, else between `n` and the most asked for.
    pub granted: u64,
    /// For a refusal, the exact time until `n` would be admitted if nothing else took capacity,
    /// in microseconds; 0 for an admission.
    pub retry_after_micros: u64,
    /// Redis' `TIME` at the decision, in microseconds since the Unix epoch.
    pub now_micros: u64,
    /// For a sliding window's admission, the time left in the window it was booked in (µs);
    /// otherwise 0.
    pub valid_micros: u64,
}

impl Verdict {
    /// Reads a script's reply.
    pub(crate) fn from_reply(reply: &[i64]) -> Option<Verdict> {
        let field = |i: usize| reply.get(i).and_then(|&v| u64::try_from(v).ok());
        Some(Verdict {
            granted: field(0)?,
            retry_after_micros: field(1)?,
            now_micros: field(2)?,
            valid_micros: field(3)?,
        })
    }
}
