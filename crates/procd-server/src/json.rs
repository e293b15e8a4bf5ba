//! The fast path's JSON writer: the bytes `serde_json::to_writer` writes,
//! for less. serde_json escapes a string byte by byte through a table and
//! hands each piece between escapes to the writer, and goes that way for
//! every key too: two thirds of a poll's serialization, a quarter of the
//! whole request (issue "the request path at socket speed"). Here a
//! string is checked eight bytes at a time and, with nothing to escape
//! (every key, most values), copied in one piece; only one that needs
//! escapes goes byte by byte.
//!
//! Numbers, booleans and null are written by serde_json itself, so they
//! cannot differ. What this writer does not know is an error, never a
//! guess: a map key that is not a string, serde_json's `RawValue`. The
//! fast path then hands the request to jsonrpsee, which answers it. Unit
//! tests compare it with serde_json over generated values and the wire's
//! own result types; `tests/protocol.rs` compares whole answers.

use serde::ser::{self, Serialize};
use std::fmt;

/// Appends `value` as compact JSON, as `serde_json::to_writer` would.
pub fn write<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), Error> {
    value.serialize(&mut Writer { out })
}

/// Something this writer leaves to serde_json (see the module doc).
#[derive(Debug)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Error {
        Error(msg.to_string())
    }
}

fn unsupported(what: &str) -> Error {
    Error(format!("the fast path's writer does not write {what}"))
}

/// Appends `text` as a JSON string, quoted.
fn write_str(out: &mut Vec<u8>, text: &str) {
    out.reserve(text.len() + 2);
    out.push(b'"');
    if needs_escape(text.as_bytes()) {
        escape_into(out, text);
    } else {
        out.extend_from_slice(text.as_bytes());
    }
    out.push(b'"');
}

/// What follows the backslash for each byte JSON escapes (`"`, `\\`,
/// below 0x20); 0 for one written as it is.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const ONES: u64 = u64::from_le_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);

/// The word's bytes that need an escape, each marked by its high bit:
/// the well-known `hasless` and `haszero` bit tricks. A borrow can mark a
/// byte above one that is marked rightly, never one below, so the lowest
/// mark (the first byte, the word read little-endian) is exact.
fn specials(w: u64) -> u64 {
    let zero_in = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    (w.wrapping_sub(ONES * 0x20) & !w & HIGHS)
        | zero_in(w ^ (ONES * u64::from(b'"')))
        | zero_in(w ^ (ONES * u64::from(b'\\')))
}

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Whether any byte of `bytes` needs an escape.
fn needs_escape(bytes: &[u8]) -> bool {
    plain_prefix(bytes) < bytes.len()
}

/// How many bytes `bytes` starts with that a JSON string holds as they
/// are: the index of the first `"`, `\\` or control character, or the
/// length. A short string goes through the table, a longer one eight
/// bytes at a time (the last word overlapping the one before, whose bytes
/// are known to be plain, so its lowest mark is still the first).
pub fn plain_prefix(bytes: &[u8]) -> usize {
    let Some(last) = bytes.len().checked_sub(8) else {
        return bytes
            .iter()
            .position(|&b| ESCAPE[usize::from(b)] != 0)
            .unwrap_or(bytes.len());
    };
    let first = |at: usize, marks: u64| at + (marks.trailing_zeros() / 8) as usize;
    let mut at = 0;
    while at < last {
        let marks = specials(word(bytes, at));
        if marks != 0 {
            return first(at, marks);
        }
        at += 8;
    }
    match specials(word(bytes, last)) {
        0 => bytes.len(),
        marks => first(last, marks),
    }
}

/// Appends `text` escaped as serde_json escapes a string's contents: `"`
/// and `\\` and the control characters below 0x20 (`\b \t \n \f \r`
/// short, the others `\u00xx` in lower case), everything else as it is.
///
/// Eight bytes at a time: a word is stored whole, and where it has a
/// byte to escape, that byte is written as its escape and the rest of the
/// word stored again after it. A read's output (a newline every few bytes
/// of `seq`) then costs ~10 instructions a byte, not ~15.
///
/// Never inlined: its 1.5 KiB buffer and saved registers would make every
/// `write_str` pay for a frame that only a string with escapes uses.
#[inline(never)]
fn escape_into(out: &mut Vec<u8>, text: &str) {
    // Escaped a piece at a time into a buffer on the stack, then copied
    // out: a byte pushed onto `out` itself makes the compiler reload the
    // Vec's length and pointer (a u8 store may alias them). A byte
    // becomes at most 6, and a word's store reaches 8 past its place.
    const PIECE: usize = 256;
    let mut buf = [0u8; 6 * PIECE + 8];
    for piece in text.as_bytes().chunks(PIECE) {
        let (mut i, mut n) = (0, 0);
        while i + 8 <= piece.len() {
            let w = word(piece, i);
            i += 8;
            buf[n..n + 8].copy_from_slice(&w.to_le_bytes());
            let mut marks = specials(w);
            // Bytes of the word written so far; a mark above a true one
            // can be false, and `escape` then writes the byte as it is.
            let mut done = 0;
            while marks != 0 {
                let at = (marks.trailing_zeros() / 8) as usize;
                marks &= marks - 1;
                n += at - done;
                n += escape(&mut buf[n..], (w >> (8 * at)) as u8);
                done = at + 1;
                if done < 8 {
                    buf[n..n + 8].copy_from_slice(&(w >> (8 * done)).to_le_bytes());
                }
            }
            n += 8 - done;
        }
        for &b in &piece[i..] {
            n += escape(&mut buf[n..], b);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Writes `b` at the start of `to` as it appears in a JSON string: itself,
/// or its escape (`to` has room for 6 bytes); says how many bytes.
fn escape(to: &mut [u8], b: u8) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match ESCAPE[usize::from(b)] {
        0 => {
            to[0] = b;
            1
        }
        b'u' => {
            to[..6].copy_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
            6
        }
        short => {
            to[0] = b'\\';
            to[1] = short;
            2
        }
    }
}

/// serde_json's writing of one scalar, into `out`.
fn scalar<T: Serialize>(out: &mut Vec<u8>, value: T) -> Result<(), Error> {
    serde_json::to_writer(out, &value).map_err(|e| Error(e.to_string()))
}

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

/// An array or object being written: whether its first element is.
struct Compound<'a, 'b> {
    writer: &'b mut Writer<'a>,
    first: bool,
}

impl Compound<'_, '_> {
    fn comma(&mut self) {
        if !std::mem::take(&mut self.first) {
            self.writer.out.push(b',');
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.comma();
        value.serialize(&mut *self.writer)
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Error> {
        self.comma();
        write_str(self.writer.out, key);
        self.writer.out.push(b':');
        value.serialize(&mut *self.writer)
    }

    /// Closes with `end` (and a variant's wrapper: `]}`, `}}`).
    fn close(self, end: &[u8]) -> Result<(), Error> {
        self.writer.out.extend_from_slice(end);
        Ok(())
    }
}

impl<'a, 'b> Writer<'a> {
    fn open(&'b mut self, start: &[u8]) -> Compound<'a, 'b> {
        self.out.extend_from_slice(start);
        Compound {
            writer: self,
            first: true,
        }
    }

    /// `{"variant":` before a variant's content.
    fn variant_key(&mut self, variant: &str) {
        self.out.push(b'{');
        write_str(self.out, variant);
        self.out.push(b':');
    }
}

/// Scalars, each written by serde_json.
macro_rules! scalars {
    ($($method:ident: $ty:ty,)*) => {$(
        fn $method(self, v: $ty) -> Result<(), Error> {
            scalar(self.out, v)
        }
    )*};
}

/// serde's four kinds of array, each closed with its `end`.
macro_rules! array_like {
    ($($kind:ident::$method:ident => $end:literal,)*) => {$(
        impl ser::$kind for Compound<'_, '_> {
            type Ok = ();
            type Error = Error;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
                self.element(value)
            }
            fn end(self) -> Result<(), Error> {
                self.close($end)
            }
        }
    )*};
}

/// serde's two kinds of struct, each closed with its `end`.
macro_rules! object_like {
    ($($kind:ident => $end:literal,)*) => {$(
        impl ser::$kind for Compound<'_, '_> {
            type Ok = ();
            type Error = Error;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), Error> {
                self.field(key, value)
            }
            fn end(self) -> Result<(), Error> {
                self.close($end)
            }
        }
    )*};
}

impl<'a, 'b> ser::Serializer for &'b mut Writer<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'a, 'b>;
    type SerializeTuple = Compound<'a, 'b>;
    type SerializeTupleStruct = Compound<'a, 'b>;
    type SerializeTupleVariant = Compound<'a, 'b>;
    type SerializeMap = Compound<'a, 'b>;
    type SerializeStruct = Compound<'a, 'b>;
    type SerializeStructVariant = Compound<'a, 'b>;

    scalars! {
        serialize_bool: bool,
        serialize_i8: i8,
        serialize_i16: i16,
        serialize_i32: i32,
        serialize_i64: i64,
        serialize_i128: i128,
        serialize_u8: u8,
        serialize_u16: u16,
        serialize_u32: u32,
        serialize_u64: u64,
        serialize_u128: u128,
        serialize_f32: f32,
        serialize_f64: f64,
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        write_str(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        write_str(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        scalar(self.out, v)
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.serialize_none()
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        self.serialize_none()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.variant_key(variant);
        value.serialize(&mut *self)?;
        self.out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'a, 'b>, Error> {
        Ok(self.open(b"["))
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'a, 'b>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Compound<'a, 'b>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'a, 'b>, Error> {
        self.variant_key(variant);
        Ok(self.open(b"["))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'a, 'b>, Error> {
        Ok(self.open(b"{"))
    }
    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<Compound<'a, 'b>, Error> {
        // serde_json writes its RawValue's text as it is.
        if name.starts_with("$serde_json::") {
            return Err(unsupported(name));
        }
        Ok(self.open(b"{"))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'a, 'b>, Error> {
        self.variant_key(variant);
        Ok(self.open(b"{"))
    }
}

array_like! {
    SerializeSeq::serialize_element => b"]",
    SerializeTuple::serialize_element => b"]",
    SerializeTupleStruct::serialize_field => b"]",
    SerializeTupleVariant::serialize_field => b"]}",
}

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    /// A key is written as any value and must have come out a string:
    /// what serde_json writes as one but is not (a number, a bool, which
    /// it quotes) and what it refuses (null, an array, an object) are
    /// errors here.
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.comma();
        let start = self.writer.out.len();
        key.serialize(&mut *self.writer)?;
        if self.writer.out.get(start) != Some(&b'"') {
            return Err(unsupported("a key that is not a string"));
        }
        self.writer.out.push(b':');
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(&mut *self.writer)
    }
    fn serialize_entry<K: Serialize + ?Sized, V: Serialize + ?Sized>(
        &mut self,
        key: &K,
        value: &V,
    ) -> Result<(), Error> {
        ser::SerializeMap::serialize_key(self, key)?;
        value.serialize(&mut *self.writer)
    }
    fn end(self) -> Result<(), Error> {
        self.close(b"}")
    }
}

object_like! {
    SerializeStruct => b"}",
    SerializeStructVariant => b"}}",
}

#[cfg(test)]
mod tests {
    use super::{escape_into, needs_escape, plain_prefix, write};
    use serde::Serialize;
    use serde_json::{json, Value};
    use std::collections::BTreeMap;

    fn ours<T: Serialize + ?Sized>(value: &T) -> Option<String> {
        let mut out = b"prefix".to_vec();
        write(&mut out, value).ok()?;
        let out = String::from_utf8(out).expect("UTF-8");
        Some(out.strip_prefix("prefix").expect("appended").to_owned())
    }

    fn same_as_serde_json<T: Serialize + ?Sized>(value: &T) {
        let theirs = serde_json::to_string(value).expect("serde_json writes it");
        assert_eq!(ours(value).as_deref(), Some(theirs.as_str()));
    }

    /// Every byte at every place in a word, and in the tail after it.
    #[test]
    fn finds_every_byte_that_needs_an_escape() {
        for len in 0..20 {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = b;
                    let expected = b < 0x20 || b == b'"' || b == b'\\';
                    assert_eq!(
                        needs_escape(&bytes),
                        expected,
                        "byte {b:#x} at {at} of {len}"
                    );
                }
            }
        }
    }

    /// Every ASCII character at every place in strings of words and
    /// tails, among plain bytes and among multi-byte characters.
    #[test]
    fn escapes_every_character_at_every_place() {
        for fill in ["a", "é", "\u{7f}", "\u{ffff}"] {
            for len in 0..24 {
                for at in 0..len {
                    for c in (0u8..0x80).map(char::from) {
                        let mut chars: Vec<String> = vec![fill.to_owned(); len];
                        chars[at] = format!("{c}{c}");
                        same_as_serde_json(&chars.concat());
                    }
                }
            }
        }
    }

    /// The first byte to escape is found wherever it is, after plain
    /// bytes of every kind, with a second one anywhere after it.
    #[test]
    fn the_plain_prefix_ends_at_the_first_byte_to_escape() {
        let first_special = |b: &[u8]| {
            b.iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .unwrap_or(b.len())
        };
        for fill in [b'a', b' ', 0x7f, 0xc3] {
            for len in 0..24 {
                let plain = vec![fill; len];
                assert_eq!(plain_prefix(&plain), len);
                for at in 0..len {
                    for c in 0u8..0x80 {
                        for second in [at, len - 1] {
                            let mut bytes = plain.clone();
                            bytes[second] = b'"';
                            bytes[at] = c;
                            assert_eq!(plain_prefix(&bytes), first_special(&bytes), "{bytes:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn escapes_as_serde_json_does() {
        let mut texts: Vec<String> = (0u32..0x80)
            .filter_map(char::from_u32)
            .map(|c| format!("a{c}b{c}{c}"))
            .collect();
        texts.extend(["".into(), "héllo \u{2028} \u{1F600} \"q\" \\".into()]);
        texts.push((0u8..0x80).map(char::from).cycle().take(5000).collect());
        for text in texts {
            let mut escaped = b"prefix".to_vec();
            escape_into(&mut escaped, &text);
            let theirs = serde_json::to_string(&text).expect("a string");
            assert_eq!(
                String::from_utf8_lossy(&escaped),
                format!("prefix{}", &theirs[1..theirs.len() - 1]),
                "{text:?}"
            );
            same_as_serde_json(&text);
        }
    }

    /// A generated value of every JSON kind, nested up to `depth`.
    fn value(next: &mut impl FnMut(u64) -> u64, depth: u32) -> Value {
        const CHARS: &[char] = &[
            'a', 'Z', '0', ' ', '"', '\\', '/', '\n', '\t', '\u{0}', '\u{1f}', '\u{7f}', 'é',
            '\u{2028}', '😀',
        ];
        let text = |next: &mut dyn FnMut(u64) -> u64| -> String {
            (0..next(24))
                .map(|_| CHARS[next(CHARS.len() as u64) as usize])
                .collect()
        };
        match next(if depth == 0 { 6 } else { 8 }) {
            0 => Value::Null,
            1 => Value::Bool(next(2) == 1),
            2 => json!(next(u64::MAX)),
            3 => json!(-(next(1 << 62) as i64)),
            4 => json!(
                (next(1 << 53) as f64) / (next(1000) + 1) as f64
                    * [1e-9, 1.0, 1e300][next(3) as usize]
            ),
            5 => Value::String(text(next)),
            6 => Value::Array((0..next(5)).map(|_| value(next, depth - 1)).collect()),
            _ => Value::Object(
                (0..next(5))
                    .map(|_| (text(next), value(next, depth - 1)))
                    .collect(),
            ),
        }
    }

    #[test]
    fn writes_what_serde_json_writes_for_generated_values() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n.max(1)
        };
        for _ in 0..20_000 {
            same_as_serde_json(&value(&mut next, 4));
        }
    }

    #[derive(Serialize)]
    struct Unit;

    #[derive(Serialize)]
    struct Pair(u8, &'static str);

    #[derive(Serialize)]
    struct Id(String);

    #[derive(Serialize)]
    #[serde(rename_all = "snake_case")]
    enum Shape {
        Plain,
        Wrapped(i32),
        Tuple(u8, char),
        Fields { x: f64, y: Option<bool> },
    }

    #[derive(Serialize)]
    struct Inner {
        #[serde(rename = "we\"ird\n")]
        weird: u64,
        shape: Shape,
    }

    #[derive(Serialize)]
    struct Outer {
        unit: Unit,
        pair: Pair,
        id: Id,
        shapes: Vec<Shape>,
        #[serde(flatten)]
        inner: Inner,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u8>,
        none: Option<u8>,
        nan: f64,
        big: u128,
        small: i128,
        ch: char,
        bytes: serde_bytes_like::Bytes,
        by_id: BTreeMap<&'static str, Shape>,
        empty: (Vec<u8>, BTreeMap<String, u8>),
    }

    mod serde_bytes_like {
        /// Serialized with `serialize_bytes`, as serde_bytes does.
        pub struct Bytes(pub &'static [u8]);
        impl serde::Serialize for Bytes {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(self.0)
            }
        }
    }

    /// Every shape serde's derive makes, flattened and nested.
    #[test]
    fn writes_what_serde_json_writes_for_every_shape() {
        let outer = Outer {
            unit: Unit,
            pair: Pair(7, "seven"),
            id: Id("proc_1".into()),
            shapes: vec![
                Shape::Plain,
                Shape::Wrapped(-3),
                Shape::Tuple(1, '"'),
                Shape::Fields { x: 0.1, y: None },
                Shape::Fields {
                    x: 1e21,
                    y: Some(true),
                },
            ],
            inner: Inner {
                weird: 42,
                shape: Shape::Plain,
            },
            skipped: None,
            none: None,
            nan: f64::NAN,
            big: u128::MAX,
            small: i128::MIN,
            ch: '\u{7}',
            bytes: serde_bytes_like::Bytes(b"\x00\xff"),
            by_id: [("a", Shape::Wrapped(1)), ("b\\", Shape::Plain)].into(),
            empty: (vec![], BTreeMap::new()),
        };
        same_as_serde_json(&outer);
    }

    /// What it does not write is an error, for serde_json to answer.
    #[test]
    fn leaves_to_serde_json_what_it_does_not_write() {
        let numbered: BTreeMap<u32, u8> = [(1, 2)].into();
        assert_eq!(ours(&numbered), None);
        let raw = serde_json::value::RawValue::from_string("{ \"a\" : 1 }".into()).expect("raw");
        assert_eq!(ours(&raw), None);
        let unit_keyed: BTreeMap<(), u8> = [((), 1)].into();
        assert_eq!(ours(&unit_keyed), None);
        assert!(serde_json::to_string(&unit_keyed).is_err());
    }
}
