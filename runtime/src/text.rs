//! `murmur:text/chunks`: token counting and chunking for guests (see wit/text/chunks.wit
//! for why the host provides it). Tokens are cl100k_base, counted with tiktoken; the
//! encoder is built once per process, on first use.

use wasmtime::Result;

use super::bindings::murmur::text::chunks::{self, Chunk, Options, Unit};
use super::state::HostState;
use murmur_config::limits::TEXT_CHUNKS_MAX;

impl chunks::Host for HostState {
    async fn split(&mut self, text: String, opts: Options) -> Result<Result<Vec<Chunk>, String>> {
        Ok(split(&text, &opts))
    }

    async fn count_tokens(&mut self, text: String) -> Result<u64> {
        Ok(count_tokens(&text))
    }
}

/// Tokens in `text` (cl100k_base).
#[must_use]
pub fn count_tokens(text: &str) -> u64 {
    tiktoken_rs::cl100k_base_singleton().encode_ordinary(text).len() as u64
}

/// Splits `text` as `murmur:text/chunks.split` specifies.
pub fn split(text: &str, opts: &Options) -> Result<Vec<Chunk>, String> {
    if opts.max_size == 0 {
        return Err("max-size must be at least 1".into());
    }
    if opts.overlap >= opts.max_size {
        return Err("overlap must be smaller than max-size".into());
    }
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < text.len() {
        if chunks.len() == TEXT_CHUNKS_MAX {
            return Err(format!("more than {TEXT_CHUNKS_MAX} chunks; use a larger max-size"));
        }
        let limit = window_end(text, start, opts);
        let end = if limit == text.len() { limit } else { preferred_cut(text, start, limit) };
        chunks.push(Chunk {
            index: chunks.len() as u32,
            start: start as u64,
            end: end as u64,
            text: text[start..end].to_owned(),
        });
        if end == text.len() {
            break;
        }
        let next = back_off(text, start, end, opts);
        start = if next > start { next } else { end };
    }
    Ok(chunks)
}

/// The furthest character boundary from `start` whose span fits `max-size`.
fn window_end(text: &str, start: usize, opts: &Options) -> usize {
    match opts.unit {
        Unit::Bytes => floor_boundary(text, (start + opts.max_size as usize).min(text.len()))
            .max(next_boundary(text, start)),
        Unit::Tokens => {
            // Largest end whose span has at most max-size tokens: binary search over bytes.
            let (mut lo, mut hi) = (next_boundary(text, start), text.len());
            if count_tokens(&text[start..hi]) <= u64::from(opts.max_size) {
                return hi;
            }
            while lo < hi {
                let mid = floor_boundary(text, lo + (hi - lo).div_ceil(2));
                if mid <= lo {
                    break;
                }
                if count_tokens(&text[start..mid]) <= u64::from(opts.max_size) {
                    lo = mid;
                } else {
                    hi = floor_boundary(text, mid - 1).max(lo);
                    if hi == lo {
                        break;
                    }
                }
            }
            lo
        }
    }
}

/// Where to cut inside `start..limit`: after the last paragraph break, else line break,
/// else whitespace, else at `limit`.
fn preferred_cut(text: &str, start: usize, limit: usize) -> usize {
    let window = &text[start..limit];
    let after = |i: usize, len: usize| start + i + len;
    if let Some(i) = window.rfind("\n\n").filter(|i| *i > 0) {
        return after(i, 2);
    }
    if let Some(i) = window.rfind('\n').filter(|i| *i > 0) {
        return after(i, 1);
    }
    if let Some(i) = window.rfind(char::is_whitespace).filter(|i| *i > 0) {
        return after(i, window[i..].chars().next().map_or(1, char::len_utf8));
    }
    limit
}

/// Where the next chunk starts: `overlap` units before `end`, on a character boundary.
fn back_off(text: &str, start: usize, end: usize, opts: &Options) -> usize {
    if opts.overlap == 0 {
        return end;
    }
    match opts.unit {
        Unit::Bytes => floor_boundary(text, end.saturating_sub(opts.overlap as usize)).max(start + 1),
        Unit::Tokens => {
            let mut at = end;
            while at > start && count_tokens(&text[at..end]) < u64::from(opts.overlap) {
                at = floor_boundary(text, at - 1);
            }
            at.max(start + 1)
        }
    }
}

fn floor_boundary(text: &str, mut at: usize) -> usize {
    while at > 0 && !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn next_boundary(text: &str, at: usize) -> usize {
    text[at..].chars().next().map_or(at, |c| at + c.len_utf8())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(unit: Unit, max_size: u32, overlap: u32) -> Options {
        Options { unit, max_size, overlap }
    }

    #[test]
    fn chunks_cover_the_text_and_respect_the_size() {
        let text = "alpha beta gamma\n\ndelta epsilon\nzeta eta theta iota kappa";
        let chunks = split(text, &opts(Unit::Bytes, 20, 0)).unwrap();
        let rebuilt: String = chunks.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(rebuilt, text);
        assert!(
            chunks.iter().all(|c| c.text.len() <= 20 && text[c.start as usize..c.end as usize] == c.text)
        );
        assert_eq!(chunks[0].text, "alpha beta gamma\n\n", "cut after the paragraph break");
    }

    #[test]
    fn never_splits_a_character_and_overlaps() {
        let text = "ééééééééé";
        let chunks = split(text, &opts(Unit::Bytes, 5, 2)).unwrap();
        assert!(chunks.iter().all(|c| c.text.chars().all(|ch| ch == 'é') && !c.text.is_empty()));
        assert!(chunks.windows(2).all(|w| w[1].start < w[0].end), "consecutive chunks overlap");
    }

    #[test]
    fn token_chunks_fit_their_budget() {
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        let chunks = split(&text, &opts(Unit::Tokens, 16, 0)).unwrap();
        assert!(chunks.len() > 1);
        assert!(chunks.iter().all(|c| count_tokens(&c.text) <= 16));
        assert_eq!(chunks.iter().map(|c| c.text.as_str()).collect::<String>(), text);
    }

    #[test]
    fn bad_options_are_refused() {
        assert!(split("x", &opts(Unit::Bytes, 0, 0)).is_err());
        assert!(split("x", &opts(Unit::Bytes, 4, 4)).is_err());
        assert_eq!(count_tokens("hello world"), 2);
    }
}
