//! The yardsticks weir is measured against, in the same run: sequential direct 1 MiB
//! writes and reads of a preallocated file (glommio, the given queue depth), and
//! loopback TCP throughput (one sender, one receiver over 127.0.0.1).

use std::cell::Cell;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use glommio::io::DmaFile;

use super::executor;

const CHUNK: usize = 1 << 20;

/// Throughputs of one raw sample, bytes per second.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct RawSample {
    pub disk_write_bps: f64,
    pub disk_read_bps: f64,
    pub tcp_bps: f64,
}

#[derive(Debug, Clone)]
pub struct RawConfig {
    pub dir: PathBuf,
    pub file_bytes: u64,
    pub seconds: f64,
    pub write_qd: usize,
    pub read_qd: usize,
}

/// Prepares the raw file (preallocated and fully written once, so reads hit real data).
pub fn prepare(cfg: &RawConfig) -> std::io::Result<()> {
    let cfg = cfg.clone();
    executor("raw-prep", move || async move {
        weir_storage::io::prime_dma_probe(&cfg.dir)
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let file = Rc::new(DmaFile::create(raw_path(&cfg.dir)).await?);
        file.pre_allocate(cfg.file_bytes, false).await?;
        let end = Instant::now() + Duration::from_secs(3600);
        pump(
            &file,
            true,
            cfg.file_bytes,
            cfg.write_qd,
            end,
            Some(cfg.file_bytes),
        )
        .await?;
        file.fdatasync().await?;
        Rc::try_unwrap(file).ok().map(|f| f.close());
        Ok(())
    })
}

fn raw_path(dir: &Path) -> PathBuf {
    let path = dir.join("raw-device.bin");
    // glommio opens relative paths against fd -1 (EBADF): hand it an absolute one.
    std::path::absolute(&path).unwrap_or(path)
}

/// Runs `seconds` of direct writes, then of direct reads, then of loopback TCP.
pub fn sample(cfg: &RawConfig) -> std::io::Result<RawSample> {
    let c = cfg.clone();
    let (w, r) = executor("raw-disk", move || async move {
        weir_storage::io::prime_dma_probe(&c.dir)
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let file = Rc::new(
            glommio::io::OpenOptions::new()
                .read(true)
                .write(true)
                .dma_open(raw_path(&c.dir))
                .await?,
        );
        let dur = Duration::from_secs_f64(c.seconds);
        let t = Instant::now();
        let w = pump(&file, true, c.file_bytes, c.write_qd, t + dur, None).await?;
        let w = w as f64 / t.elapsed().as_secs_f64();
        let t = Instant::now();
        let r = pump(&file, false, c.file_bytes, c.read_qd, t + dur, None).await?;
        let r = r as f64 / t.elapsed().as_secs_f64();
        Ok::<_, std::io::Error>((w, r))
    })?;
    let tcp = loopback_tcp(Duration::from_secs_f64(cfg.seconds))?;
    Ok(RawSample {
        disk_write_bps: w,
        disk_read_bps: r,
        tcp_bps: tcp,
    })
}

/// Keeps `qd` 1 MiB direct I/Os in flight over the file, sequentially and wrapping, until
/// `deadline` or `limit` bytes; returns the bytes moved.
async fn pump(
    file: &Rc<DmaFile>,
    write: bool,
    file_bytes: u64,
    qd: usize,
    deadline: Instant,
    limit: Option<u64>,
) -> std::io::Result<u64> {
    let next = Rc::new(Cell::new(0u64));
    let moved = Rc::new(Cell::new(0u64));
    let mut tasks = Vec::new();
    for _ in 0..qd.max(1) {
        let (file, next, moved) = (file.clone(), next.clone(), moved.clone());
        tasks.push(glommio::spawn_local(async move {
            let mut buf = file.alloc_dma_buffer(CHUNK);
            buf.as_bytes_mut().fill(0x5a);
            let buf = Rc::new(buf);
            while Instant::now() < deadline {
                let pos = next.get();
                if limit.is_some_and(|l| pos >= l) {
                    break;
                }
                let following = pos + CHUNK as u64;
                next.set(if limit.is_none() && following >= file_bytes {
                    0
                } else {
                    following
                });
                if write {
                    file.write_rc_at(buf.clone(), pos).await?;
                } else {
                    file.read_at_aligned(pos, CHUNK).await?;
                }
                moved.set(moved.get() + CHUNK as u64);
            }
            Ok::<_, std::io::Error>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| std::io::Error::other(e.to_string()))?;
    }
    Ok(moved.get())
}

/// One TCP stream over loopback, 1 MiB writes, for `dur`; bytes per second received.
pub fn loopback_tcp(dur: Duration) -> std::io::Result<f64> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let receiver = std::thread::spawn(move || -> std::io::Result<(u64, Duration)> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; CHUNK];
        let mut total = 0u64;
        let start = Instant::now();
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok((total, start.elapsed()));
            }
            total += n as u64;
        }
    });
    let mut s = std::net::TcpStream::connect(addr)?;
    let buf = vec![0x5au8; CHUNK];
    let end = Instant::now() + dur;
    while Instant::now() < end {
        s.write_all(&buf)?;
    }
    drop(s);
    let (total, elapsed) = receiver
        .join()
        .map_err(|_| std::io::Error::other("tcp receiver panicked"))??;
    Ok(total as f64 / elapsed.as_secs_f64())
}
