# plot.gp: draws what demos/bench/bench.py wrote into `dir` as SVG next to its CSV files:
# latency.svg, bandwidth.svg, rate.svg and streams.svg.   gnuplot -e "dir='bench-results'" demos/bench/plot.gp
if (!exists("dir")) dir = "bench-results"
set datafile separator ","
set terminal svg size 900,500 dynamic enhanced font "sans,12" background rgb "white"
set key top left box opaque
set grid xtics ytics mxtics mytics lc rgb "#dddddd"
set logscale x 2
set xlabel "message size"
sizes = '("1 B" 1, "8 B" 8, "64 B" 64, "512 B" 512, "4 KiB" 4096, "32 KiB" 32768, "256 KiB" 262144, "1 MiB" 1048576)'
eval "set xtics ".sizes

# Round-trip latency against message size: both event modes, both polling modes, and the floor
# for polling: raw-pingpong (verbs alone, set up as pingpong is).
set output dir."/latency.svg"
set title "Round-trip latency: pingpong vs ib\\_send\\_lat"
set xrange [0.7:1.5e6]
set logscale y 10
set ylabel "microseconds per round trip (average)"
plot dir."/latency.csv" using 1:3 every ::1 with linespoints lw 2 pt 7 lc rgb "#1f77b4" title "evrdma, event mode", \
     ""                 using 1:2 every ::1 with linespoints lw 2 pt 6 dt 2 lc rgb "#1f77b4" title "ib\\_send\\_lat -e", \
     ""                 using 1:5 every ::1 with linespoints lw 2 pt 5 lc rgb "#d62728" title "evrdma, adaptive polling (-P)", \
     ""                 using 1:4 every ::1 with linespoints lw 2 pt 4 dt 2 lc rgb "#d62728" title "ib\\_send\\_lat (busy-polling)", \
     ""                 using 1:10 every ::1 with linespoints lw 2 pt 3 dt 3 lc rgb "#7f7f7f" title "raw-pingpong (busy-polling, no library)"

# One-way throughput per mode against message size.
set output dir."/bandwidth.svg"
set title "One-way throughput: blast vs perftest"
set xrange [3000:1.4e6]
unset logscale y
set yrange [0:*]
set ylabel "MB/s (10^6 bytes)"
set key outside right top box
plot dir."/bandwidth.csv" using 2:(stringcolumn(1) eq "send" ? $3 : NaN) every ::1 with linespoints lw 2 pt 7 lc rgb "#1f77b4" title "blast send", \
     "" using 2:(stringcolumn(1) eq "send" ? $4 : NaN) every ::1 with linespoints lw 2 pt 6 dt 2 lc rgb "#1f77b4" title "ib\\_send\\_bw -e", \
     "" using 2:(stringcolumn(1) eq "write" ? $3 : NaN) every ::1 with linespoints lw 2 pt 5 lc rgb "#2ca02c" title "blast write (-P)", \
     "" using 2:(stringcolumn(1) eq "write" ? $4 : NaN) every ::1 with linespoints lw 2 pt 4 dt 2 lc rgb "#2ca02c" title "ib\\_write\\_bw", \
     "" using 2:(stringcolumn(1) eq "read" ? $3 : NaN) every ::1 with linespoints lw 2 pt 9 lc rgb "#9467bd" title "blast read", \
     "" using 2:(stringcolumn(1) eq "read" ? $4 : NaN) every ::1 with linespoints lw 2 pt 8 dt 2 lc rgb "#9467bd" title "ib\\_read\\_bw -e"

# Message rate: one request per post, and lists of 16.
set output dir."/rate.svg"
set title "Message rate: blast -P vs busy-polling perftest"
set xrange [6:5500]
set ylabel "operations per second"
set key outside right top box
plot dir."/rate.csv" using 2:(stringcolumn(1) eq "send" ? $3 : NaN) every ::1 with linespoints lw 2 pt 7 lc rgb "#1f77b4" title "blast send", \
     "" using 2:(stringcolumn(1) eq "send" ? $4 : NaN) every ::1 with linespoints lw 2 pt 6 dt 2 lc rgb "#1f77b4" title "ib\\_send\\_bw", \
     "" using 2:(stringcolumn(1) eq "send" ? $5 : NaN) every ::1 with linespoints lw 2 pt 5 lc rgb "#17becf" title "blast send -l 16", \
     "" using 2:(stringcolumn(1) eq "send" ? $6 : NaN) every ::1 with linespoints lw 2 pt 4 dt 2 lc rgb "#17becf" title "ib\\_send\\_bw --post\\_list 16", \
     "" using 2:(stringcolumn(1) eq "write" ? $3 : NaN) every ::1 with linespoints lw 2 pt 9 lc rgb "#2ca02c" title "blast write", \
     "" using 2:(stringcolumn(1) eq "write" ? $4 : NaN) every ::1 with linespoints lw 2 pt 8 dt 2 lc rgb "#2ca02c" title "ib\\_write\\_bw", \
     "" using 2:(stringcolumn(1) eq "write" ? $5 : NaN) every ::1 with linespoints lw 2 pt 11 lc rgb "#bcbd22" title "blast write -l 16", \
     "" using 2:(stringcolumn(1) eq "write" ? $6 : NaN) every ::1 with linespoints lw 2 pt 10 dt 2 lc rgb "#bcbd22" title "ib\\_write\\_bw --post\\_list 16"

# Byte streams (bench.py --only streams): one-way throughput against the size of the program's
# writes, stream-bench on evrdma against rstream; TCP as a reference.
set output dir."/streams.svg"
set title "Byte streams: stream-bench on evrdma vs rstream (rsockets)"
set xrange [40:100000]
set logscale y 10
set yrange [*:*]
set xlabel "bytes per write"
set ylabel "Gb/s, one way"
set key outside right top box
eval "set xtics (\"64 B\" 64, \"4 KiB\" 4096, \"64 KiB\" 65536)"
plot dir."/streams.csv" using 1:2 every ::1 with linespoints lw 2 pt 7 lc rgb "#1f77b4" title "evrdma stream (event-driven)", \
     "" using 1:3 every ::1 with linespoints lw 2 pt 6 dt 2 lc rgb "#1f77b4" title "rstream -T b (blocking)", \
     "" using 1:11 every ::1 with linespoints lw 2 pt 5 lc rgb "#d62728" title "evrdma stream (--poll 100)", \
     "" using 1:4 every ::1 with linespoints lw 2 pt 4 dt 2 lc rgb "#d62728" title "rstream (polling)", \
     "" using 1:5 every ::1 with linespoints lw 1 pt 3 dt 3 lc rgb "#7f7f7f" title "TCP: stream-bench", \
     "" using 1:6 every ::1 with linespoints lw 1 pt 2 dt 3 lc rgb "#bbbbbb" title "TCP: rstream -T s"
