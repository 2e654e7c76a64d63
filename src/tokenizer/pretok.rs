//! rml's own splitter for the Qwen2 and Llama 3 pre-tokenizer regexes.
//!
//! The two patterns (llama.cpp's `LLAMA_VOCAB_PRE_TYPE_QWEN2` and `_LLAMA3`, also in those
//! models' `tokenizer.json`) are
//!
//! ```text
//! (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//! ```
//!
//! with `D = 1` (Qwen2) or `D = 3` (Llama 3). Compiling them through `tokenizers`' `Split`
//! (fancy-regex over regex-automata) costs about 2.7 ms per tokenizer, most of the time it
//! takes to build one from a GGUF vocabulary, and `Split` recompiles on every clone. This
//! module walks the alternatives by hand instead, with the leftmost-first, backtracking
//! semantics of those engines, so it splits every string exactly as the regex does (tested
//! against `tokenizers`' `Split` on fixed strings and on generated ones in
//! `tests/cli_tokenizer.rs`). The character classes `\p{L}`, `\p{N}`, `\s` and the
//! case-insensitive letters come from `regex-syntax`, the crate that defines them for the
//! regex engines, so both sides use the same Unicode tables.

use alloc::vec::Vec;
use std::sync::OnceLock;

use regex_syntax::hir::{Class, HirKind};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::tokenizer::pattern::Pattern;
use tokenizers::{Offsets, PreTokenizedString, PreTokenizer, SplitDelimiterBehavior};

/// Qwen2's pre-tokenizer regex (llama.cpp's `LLAMA_VOCAB_PRE_TYPE_QWEN2`; also in Qwen2's
/// tokenizer.json): contractions, letters with one leading non-letter, single digits,
/// punctuation runs, newlines, spaces.
pub(crate) const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's pre-tokenizer regex (`llama-bpe`): as Qwen2's with up to three digits per piece.
pub(crate) const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// What the pattern distinguishes about one character.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// `\p{L}`.
    Letter,
    /// `\p{N}`.
    Number,
    /// `\r` or `\n` (also `\s`).
    Newline,
    /// `\s` other than `\r`, `\n`.
    Space,
    /// Anything else: `[^\s\p{L}\p{N}]`.
    Other,
}

/// The Unicode tables, built once per process from `regex-syntax`.
struct Tables {
    ascii: [Kind; 128],
    /// Sorted, disjoint ranges of non-`Other` characters above ASCII.
    ranges: Vec<(u32, u32, Kind)>,
    /// The characters `(?i:x)` matches, for each contraction letter `x`.
    folds: [(char, Vec<(u32, u32)>); 8],
}

/// The ranges of the single class `pattern` (e.g. `\p{L}`) as regex-syntax defines it.
fn class_ranges(pattern: &str) -> Vec<(u32, u32)> {
    match regex_syntax::parse(pattern).map(|h| h.into_kind()) {
        Ok(HirKind::Class(Class::Unicode(c))) => {
            c.ranges().iter().map(|r| (u32::from(r.start()), u32::from(r.end()))).collect()
        }
        // The patterns are constants of this file; a unit test checks each parses to a class.
        _ => Vec::new(),
    }
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let mut ranges = Vec::new();
        for (pat, kind) in
            [(r"\p{L}", Kind::Letter), (r"\p{N}", Kind::Number), (r"\s", Kind::Space)]
        {
            ranges.extend(class_ranges(pat).into_iter().map(|(a, b)| (a, b, kind)));
        }
        let mut ascii = [Kind::Other; 128];
        for (c, slot) in ascii.iter_mut().enumerate() {
            let c = c as u32;
            if let Some(&(_, _, k)) = ranges.iter().find(|&&(a, b, _)| a <= c && c <= b) {
                *slot = k;
            }
        }
        ascii[usize::from(b'\r')] = Kind::Newline;
        ascii[usize::from(b'\n')] = Kind::Newline;
        ranges.retain(|&(_, b, _)| b >= 0x80);
        for r in &mut ranges {
            r.0 = r.0.max(0x80);
        }
        ranges.sort_unstable_by_key(|r| r.0);
        let folds = [b's', b't', b'r', b'e', b'v', b'm', b'l', b'd']
            .map(|b| (char::from(b), class_ranges(&alloc::format!("(?i:{})", char::from(b)))));
        Tables { ascii, ranges, folds }
    })
}

impl Tables {
    #[inline]
    fn kind(&self, c: char) -> Kind {
        let u = u32::from(c);
        if u < 0x80 {
            return self.ascii[u as usize];
        }
        let i = self.ranges.partition_point(|r| r.0 <= u);
        match i.checked_sub(1).map(|i| self.ranges[i]) {
            Some((_, end, k)) if u <= end => k,
            _ => Kind::Other,
        }
    }

    /// Whether `c` matches the contraction letter `x` case-insensitively, as `(?i:x)` does.
    fn is_fold_of(&self, c: char, x: char) -> bool {
        let u = u32::from(c);
        self.folds
            .iter()
            .find(|(l, _)| *l == x)
            .is_some_and(|(_, r)| r.iter().any(|&(a, b)| a <= u && u <= b))
    }
}

/// The end (byte offset) of the regex's match at `start` (a char boundary of `s`, not its
/// end). Some alternative matches at every position, so the match is never empty.
fn match_end(t: &Tables, s: &str, start: usize, max_digits: usize) -> usize {
    let rest = &s[start..];
    let mut it = rest.char_indices();
    // `start < s.len()`, so there is a first character.
    let Some((_, c0)) = it.next() else { return s.len() };
    let k0 = t.kind(c0);
    let next = |from: usize| rest[from..].chars().next();
    let after0 = c0.len_utf8();
    // The end of the run of characters of kinds `ok`, from byte `from` of `rest`.
    let run = |from: usize, ok: &dyn Fn(Kind) -> bool| {
        let mut end = from;
        for c in rest[from..].chars() {
            if !ok(t.kind(c)) {
                break;
            }
            end += c.len_utf8();
        }
        end
    };

    // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if c0 == '\'' {
        if let Some(c1) = next(after0) {
            let at2 = after0 + c1.len_utf8();
            if ['s', 't', 'm', 'd'].iter().any(|&x| t.is_fold_of(c1, x)) {
                return start + at2;
            }
            for (x, y) in [('r', 'e'), ('v', 'e'), ('l', 'l')] {
                if t.is_fold_of(c1, x) && next(at2).is_some_and(|c2| t.is_fold_of(c2, y)) {
                    return start + at2 + next(at2).map_or(0, char::len_utf8);
                }
            }
        }
    }
    // 2. [^\r\n\p{L}\p{N}]?\p{L}+
    let letters = |k: Kind| k == Kind::Letter;
    if k0 == Kind::Letter {
        return start + run(0, &letters);
    }
    if matches!(k0, Kind::Space | Kind::Other)
        && next(after0).is_some_and(|c| t.kind(c) == Kind::Letter)
    {
        return start + run(after0, &letters);
    }
    // 3. \p{N}{1,D}
    if k0 == Kind::Number {
        let mut end = 0;
        for c in rest.chars().take(max_digits) {
            if t.kind(c) != Kind::Number {
                break;
            }
            end += c.len_utf8();
        }
        return start + end;
    }
    // 4. ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    let other = |k: Kind| k == Kind::Other;
    let newline = |k: Kind| k == Kind::Newline;
    let punct_from = if k0 == Kind::Other {
        Some(0)
    } else if c0 == ' ' && next(after0).is_some_and(|c| t.kind(c) == Kind::Other) {
        Some(after0)
    } else {
        None
    };
    if let Some(from) = punct_from {
        let end = run(from, &other);
        return start + run(end, &newline);
    }
    // Only whitespace is left (`k0` is Space or Newline).
    let ws = |k: Kind| matches!(k, Kind::Space | Kind::Newline);
    let ws_end = run(0, &ws);
    // 5. \s*[\r\n]+ : the backtracking \s* stops before the run's last newline.
    if let Some((i, c)) =
        rest[..ws_end].char_indices().rev().find(|&(_, c)| t.kind(c) == Kind::Newline)
    {
        return start + i + c.len_utf8();
    }
    // 6. \s+(?!\S) : the whole run at the end of the text, else all of it but its last char.
    if start + ws_end == s.len() {
        return s.len();
    }
    let last = rest[..ws_end].chars().next_back().map_or(0, char::len_utf8);
    if ws_end > last {
        return start + ws_end - last;
    }
    // 7. \s+
    start + ws_end
}

/// Splits `s` into the pieces the Qwen2 (`max_digits = 1`) or Llama 3 (`max_digits = 3`)
/// regex matches, calling `piece(start, end)` (byte offsets) for each in order. The pieces
/// cover `s` without gaps.
pub(crate) fn split_pieces(s: &str, max_digits: usize, mut piece: impl FnMut(usize, usize)) {
    let t = tables();
    let mut at = 0;
    while at < s.len() {
        // Never an empty piece, whatever `match_end` says (it cannot be empty: see there).
        let first = s[at..].chars().next().map_or(1, char::len_utf8);
        let end = match_end(t, s, at, max_digits).max(at + first);
        piece(at, end);
        at = end;
    }
}

/// [`split_pieces`] as a `tokenizers` [`Pattern`].
#[derive(Clone, Copy, Debug)]
struct Pieces(usize);

impl Pattern for Pieces {
    fn find_matches(&self, inside: &str) -> tokenizers::Result<Vec<(Offsets, bool)>> {
        if inside.is_empty() {
            return Ok(alloc::vec![((0, 0), false)]);
        }
        let mut out = Vec::new();
        split_pieces(inside, self.0, |a, b| out.push(((a, b), true)));
        Ok(out)
    }
}

/// The byte-level BPE pre-tokenizer of a Qwen2 / Llama 3 GGUF vocabulary: the pattern's
/// pieces (as `tokenizers`' `Split` with `Isolated`), then GGUF-style byte-level mapping
/// (`ByteLevel` without prefix space and without its own regex). Serialized as that
/// `Sequence`, so a saved `tokenizer.json` reads back in `tokenizers`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RegexBpePre {
    max_digits: usize,
}

impl RegexBpePre {
    /// Qwen2's pattern (one digit per piece).
    pub(crate) const QWEN2: Self = RegexBpePre { max_digits: 1 };
    /// Llama 3's pattern (up to three digits per piece).
    pub(crate) const LLAMA3: Self = RegexBpePre { max_digits: 3 };

    /// The regex this splitter implements.
    pub(crate) fn regex(self) -> &'static str {
        if self.max_digits == 1 {
            QWEN2_REGEX
        } else {
            LLAMA3_REGEX
        }
    }

    fn byte_level() -> ByteLevel {
        ByteLevel::new(false, true, false)
    }

    /// The same pre-tokenizer as `tokenizers` builds it (compiles the regex).
    pub(crate) fn to_wrapper(self) -> tokenizers::Result<PreTokenizerWrapper> {
        let split = Split::new(
            SplitPattern::Regex(self.regex().into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )?;
        Ok(Sequence::new(alloc::vec![split.into(), Self::byte_level().into()]).into())
    }
}

impl PreTokenizer for RegexBpePre {
    fn pre_tokenize(&self, pretokenized: &mut PreTokenizedString) -> tokenizers::Result<()> {
        let pat = Pieces(self.max_digits);
        pretokenized.split(|_, s| s.split(pat, SplitDelimiterBehavior::Isolated))?;
        Self::byte_level().pre_tokenize(pretokenized)
    }
}

impl serde::Serialize for RegexBpePre {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> core::result::Result<S::Ok, S::Error> {
        self.to_wrapper().map_err(serde::ser::Error::custom)?.serialize(ser)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;
    use proptest::strategy::Strategy;

    #[test]
    fn every_class_pattern_parses_to_a_nonempty_class() {
        for p in [r"\p{L}", r"\p{N}", r"\s", "(?i:s)", "(?i:l)"] {
            assert!(!class_ranges(p).is_empty(), "{p}");
        }
        let t = tables();
        assert!(t.is_fold_of('\u{17F}', 's'), "long s folds to s");
        assert!(t.is_fold_of('S', 's') && !t.is_fold_of('x', 's'));
        assert_eq!(t.kind('\u{3000}'), Kind::Space);
        assert_eq!(t.kind('\u{0663}'), Kind::Number);
        assert_eq!(t.kind('日'), Kind::Letter);
        assert_eq!(t.kind('\u{301}'), Kind::Other, "a combining mark is not \\p{{L}}");
        assert_eq!(t.kind('\n'), Kind::Newline);
    }

    fn pieces(s: &str, d: usize) -> Vec<&str> {
        let mut v = Vec::new();
        split_pieces(s, d, |a, b| v.push(&s[a..b]));
        v
    }

    #[test]
    fn splits_by_hand_worked_examples() {
        assert_eq!(pieces("Hello world", 3), ["Hello", " world"]);
        assert_eq!(pieces("I'm 12345 ok", 3), ["I", "'m", " ", "123", "45", " ok"]);
        assert_eq!(pieces("I'm 12345 ok", 1), ["I", "'m", " ", "1", "2", "3", "4", "5", " ok"]);
        assert_eq!(pieces("a  \n  b", 3), ["a", "  \n", " ", " b"]);
        assert_eq!(pieces("x ... y\n\n", 3), ["x", " ...", " y", "\n\n"]);
        assert_eq!(pieces("end   ", 3), ["end", "   "]);
        assert_eq!(pieces("\t(", 3), ["\t", "("]);
        assert_eq!(pieces("'LL 'Re", 3), ["'LL", " '", "Re"]);
    }

    /// The pieces `tokenizers`' `Split` (the compiled regex) makes of `s`.
    fn regex_pieces(split: &Split, s: &str) -> Vec<String> {
        use tokenizers::{OffsetReferential, OffsetType};
        let mut p = PreTokenizedString::from(s);
        split.pre_tokenize(&mut p).unwrap();
        p.get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(piece, _, _)| piece.into())
            .collect()
    }

    fn splits() -> [(Split, usize); 2] {
        [(QWEN2_REGEX, 1), (LLAMA3_REGEX, 3)].map(|(re, d)| {
            let split =
                Split::new(SplitPattern::Regex(re.into()), SplitDelimiterBehavior::Isolated, false)
                    .unwrap();
            (split, d)
        })
    }

    fn assert_agrees(splits: &[(Split, usize)], s: &str) {
        for (split, d) in splits {
            let ours: Vec<String> = pieces(s, *d).into_iter().map(String::from).collect();
            assert_eq!(ours, regex_pieces(split, s), "max_digits {d}, text {s:?}");
        }
    }

    /// Characters at every edge of the pattern: each class, the case folds of the
    /// contractions (`ſ` is `(?i:s)`), `\r\n`, Unicode spaces and numbers, combining marks.
    const TRICKY: &[char] = &[
        'a',
        'Z',
        's',
        'S',
        '\u{17F}',
        't',
        'T',
        'r',
        'R',
        'e',
        'E',
        'v',
        'm',
        'l',
        'L',
        'd',
        'D',
        'k',
        '\u{212A}',
        '\'',
        '\u{2019}',
        '0',
        '7',
        '\u{663}',
        '\u{BD}',
        '\u{216B}',
        '\u{2460}',
        ' ',
        ' ',
        ' ',
        '\t',
        '\n',
        '\r',
        '\u{B}',
        '\u{C}',
        '\u{85}',
        '\u{A0}',
        '\u{1680}',
        '\u{2028}',
        '\u{2029}',
        '\u{3000}',
        '\u{200B}',
        '\u{FEFF}',
        '.',
        ',',
        '!',
        '(',
        '-',
        '_',
        '$',
        '\u{1F389}',
        '日',
        'é',
        '\u{301}',
        '\u{903}',
        'ß',
        '\u{130}',
        '\u{2C65}',
        '\u{0}',
    ];

    /// Pieces where two alternatives of the pattern compete: every contraction (cased,
    /// folded), digit runs longer than a piece, newline and space runs.
    const FRAGMENTS: &[&str] = &[
        "'s",
        "'S",
        "'\u{17F}",
        "'t",
        "'T",
        "'re",
        "'rE",
        "'RE",
        "'ve",
        "'Ve",
        "'m",
        "'M",
        "'ll",
        "'lL",
        "'d",
        "'D",
        "'r",
        "'l",
        "'v",
        "\r\n",
        "\n\n",
        "  ",
        "   ",
        " \n ",
        "1234567",
        "\u{663}\u{664}\u{665}\u{666}",
    ];

    #[test]
    fn agrees_with_the_compiled_regex_on_fixed_strings() {
        let splits = splits();
        let long = "It's 2024 -- we'VE   said:\r\n\r\n  \"don't\" 12345678 times!!\n\t\n ";
        for s in [
            "",
            " ",
            "\n",
            "Hello world",
            "Once upon a time, there was a little",
            "The capital of France is",
            "  leading and trailing  ",
            "x\u{A0}\u{A0}y \u{3000}z",
            "\u{17F}'\u{17F} '\u{17F}T 'll'LL 'Re'rE",
            "'mx 'sx 'tx 'dx 'rex 'vex 'llx 'Mx 'Sx 'r 'l 'v",
            "naïve café — ١٢٣٤ ½ Ⅻ ①",
            "fn main() {\n    println!(\"hi\");\n}\n",
            "<|im_start|>user\nhi<|im_end|>\n",
            "🎉🎉 🎉\u{301}a\u{301}",
            long,
        ] {
            assert_agrees(&splits, s);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn agrees_with_the_compiled_regex(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    4 => proptest::sample::select(TRICKY).prop_map(String::from),
                    2 => proptest::sample::select(FRAGMENTS).prop_map(String::from),
                    1 => proptest::char::any().prop_map(String::from),
                ],
                0..32,
            )
        ) {
            std::thread_local! {
                static SPLITS: [(Split, usize); 2] = splits();
            }
            let s: String = parts.concat();
            SPLITS.with(|sp| assert_agrees(sp, &s));
        }
    }
}
