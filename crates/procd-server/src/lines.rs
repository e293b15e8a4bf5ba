//! Request lines, framed on bytes: a line that is not UTF-8 still ends at
//! its `\n` (it gets a parse error and the connection carries on).
//!
//! tokio-util's `AnyDelimiterCodec` did this before and cost ~1.5k
//! instructions a request: it tests every byte against a delimiter set.
//! Here `memchr` finds the one delimiter; the framing is the same (see
//! `tests::frames_as_any_delimiter_codec_did`).

use tokio_util::bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

/// Splits a stream into `\n`-terminated lines of at most `max_length`
/// bytes (the `\n` not counted).
pub struct LineCodec {
    max_length: usize,
    /// Where the search for `\n` resumes: what is before it has none.
    searched: usize,
}

/// Why no line came.
#[derive(Debug)]
pub enum LineError {
    /// `max_length` bytes came without a `\n`: the connection is refused
    /// (the codec frames nothing after this).
    TooLong,
    Io,
}

impl From<std::io::Error> for LineError {
    fn from(_: std::io::Error) -> LineError {
        LineError::Io
    }
}

impl LineCodec {
    pub fn new(max_length: usize) -> LineCodec {
        LineCodec {
            max_length,
            searched: 0,
        }
    }
}

impl Decoder for LineCodec {
    type Item = Vec<u8>;
    type Error = LineError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<u8>>, LineError> {
        // A line of max_length bytes may still have its \n right after.
        let read_to = buf.len().min(self.max_length.saturating_add(1));
        match memchr::memchr(b'\n', &buf[self.searched.min(read_to)..read_to]) {
            Some(at) => {
                let end = self.searched + at;
                let line = buf[..end].to_vec();
                buf.advance(end + 1);
                self.searched = 0;
                Ok(Some(line))
            }
            None if buf.len() > self.max_length => Err(LineError::TooLong),
            None => {
                self.searched = read_to;
                Ok(None)
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<u8>>, LineError> {
        // The last line may lack its \n.
        Ok(match self.decode(buf)? {
            Some(line) => Some(line),
            None if buf.is_empty() => None,
            None => {
                self.searched = 0;
                let line = buf.to_vec();
                buf.clear();
                Some(line)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError};

    /// What each codec makes of `input` fed in `pieces`: the lines, then
    /// whether it ended on a too-long line.
    fn frames<D, E>(codec: &mut D, input: &[u8], pieces: &[usize]) -> (Vec<Vec<u8>>, bool)
    where
        D: Decoder<Error = E>,
        D::Item: AsRef<[u8]>,
    {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut rest = input;
        for &n in pieces.iter().chain(std::iter::repeat(&usize::MAX)) {
            let n = n.min(rest.len());
            buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            loop {
                let next = if rest.is_empty() {
                    codec.decode_eof(&mut buf)
                } else {
                    codec.decode(&mut buf)
                };
                match next {
                    Ok(Some(line)) => out.push(line.as_ref().to_vec()),
                    Ok(None) => break,
                    Err(_) => return (out, true),
                }
            }
            if rest.is_empty() {
                return (out, false);
            }
        }
        unreachable!("the input runs out")
    }

    #[test]
    fn frames_as_any_delimiter_codec_did() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |bound: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % bound) as usize
        };
        for round in 0..5000 {
            let max = 1 + next(40);
            let len = next(200);
            let input: Vec<u8> = (0..len)
                .map(|_| match next(6) {
                    0 => b'\n',
                    1 => 0xff,
                    _ => b'a' + next(26) as u8,
                })
                .collect();
            let pieces: Vec<usize> = (0..next(20)).map(|_| next(30)).collect();
            let ours = frames(&mut LineCodec::new(max), &input, &pieces);
            let mut theirs =
                AnyDelimiterCodec::new_with_max_length(b"\n".to_vec(), Vec::new(), max);
            let theirs = frames::<_, AnyDelimiterCodecError>(&mut theirs, &input, &pieces);
            assert_eq!(
                ours, theirs,
                "round {round}: max {max}, pieces {pieces:?}, input {input:?}"
            );
        }
    }
}
