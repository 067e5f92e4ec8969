package org.fleetview.opensearch;

import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.core.appender.ConsoleAppender;
import org.apache.logging.log4j.core.config.Configurator;
import org.apache.logging.log4j.core.config.builder.api.ConfigurationBuilder;
import org.apache.logging.log4j.core.config.builder.api.ConfigurationBuilderFactory;
import org.apache.logging.log4j.core.config.builder.impl.BuiltConfiguration;

/**
 * Runs one OpenSearch 2.19 node in this JVM, for tests.
 *
 * <p>Usage: {@code Launcher [--home DIR] [--http-port N] [--cluster-name NAME]
 * [--log-level LEVEL] [--no-stdin] [--delete-home] [-E key=value ...]}.
 * Without --home a temporary directory is used (and deleted). --delete-home removes the
 * home directory (data included) after the node closed.
 *
 * <p>Prints exactly one line {@code ready http://127.0.0.1:PORT} to stdout once
 * cluster health is at least yellow; everything else (logs) goes to stderr.
 * Stops on SIGTERM/SIGINT, or when stdin reaches EOF (unless --no-stdin).
 *
 * <p>This class must not extend Node itself: loading Node initialises
 * log4j through its static loggers, and log4j has to be configured first.
 */
public final class Launcher {

    private Launcher() {}

    /** Node's constructor with classpath plugins is protected: expose it. */
    private static final class EmbeddedNode extends org.opensearch.node.Node {
        EmbeddedNode(org.opensearch.env.Environment env,
                     Collection<Class<? extends org.opensearch.plugins.Plugin>> plugins) {
            super(env, plugins, true);
        }
    }

    private static final class Args {
        volatile Path home;
        int httpPort = 0;
        String clusterName = "fleetview-test";
        String logLevel = "WARN";
        boolean watchStdin = true;
        volatile boolean deleteHome = false;
        final java.util.LinkedHashMap<String, String> extra = new java.util.LinkedHashMap<>();
    }

    public static void main(String[] argv) {
        // Keep the real stdout for the single ready line; anything else that
        // prints to System.out (libraries, JVM helpers) goes to stderr.
        final PrintStream stdout = new PrintStream(
            new java.io.FileOutputStream(java.io.FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);

        final Args args;
        try {
            args = parse(argv);
        } catch (IllegalArgumentException e) {
            System.err.println("launcher: " + e.getMessage());
            System.exit(2);
            return;
        }
        configureLogging(args.logLevel);

        final CountDownLatch stopped = new CountDownLatch(1);
        final AtomicBoolean stopping = new AtomicBoolean();
        final EmbeddedNode[] holder = new EmbeddedNode[1];

        Thread hook = new Thread(() -> {
            stopping.set(true);
            EmbeddedNode n;
            synchronized (holder) {
                n = holder[0];
            }
            if (n != null) {
                try {
                    n.close();
                    if (!n.awaitClose(30, TimeUnit.SECONDS)) {
                        System.err.println("launcher: node did not close within 30s");
                    }
                } catch (Exception e) {
                    System.err.println("launcher: error closing node: " + e);
                }
            }
            if (args.deleteHome && args.home != null) {
                deleteTree(args.home);
            }
            stopped.countDown();
        }, "launcher-shutdown");
        Runtime.getRuntime().addShutdownHook(hook);

        if (args.watchStdin) {
            Thread watcher = new Thread(() -> {
                try {
                    InputStream in = System.in;
                    byte[] buf = new byte[256];
                    while (in.read(buf) >= 0) {
                        // ignore input; only EOF matters
                    }
                } catch (IOException ignored) {
                    // treat as EOF
                }
                System.exit(0); // runs the shutdown hook
            }, "launcher-stdin");
            watcher.setDaemon(true);
            watcher.start();
        }

        try {
            if (args.home == null) {
                args.home = Files.createTempDirectory("opensearch-home-");
                args.deleteHome = true;
            }
            Files.createDirectories(args.home);

            org.opensearch.common.settings.Settings.Builder sb = org.opensearch.common.settings.Settings.builder()
                .put("path.home", args.home.toAbsolutePath().toString())
                .put("cluster.name", args.clusterName)
                .put("node.name", args.clusterName + "-node-0")
                .put("discovery.type", "single-node")
                .put("network.host", "127.0.0.1")
                .put("http.port", Integer.toString(args.httpPort))
                .put("transport.port", "0")
                .put("cluster.routing.allocation.disk.threshold_enabled", false);
            args.extra.forEach(sb::put);
            org.opensearch.common.settings.Settings settings = sb.build();

            org.opensearch.env.Environment env = org.opensearch.node.InternalSettingsPreparer.prepareEnvironment(
                settings, Collections.emptyMap(), null, () -> args.clusterName + "-node-0");

            List<Class<? extends org.opensearch.plugins.Plugin>> plugins = Arrays.asList(
                org.opensearch.transport.Netty4Plugin.class,
                org.opensearch.analysis.common.CommonAnalysisPlugin.class,
                org.opensearch.painless.PainlessPlugin.class,
                org.opensearch.index.mapper.MapperExtrasPlugin.class);

            EmbeddedNode node = new EmbeddedNode(env, plugins);
            synchronized (holder) {
                if (stopping.get()) {
                    node.close();
                    return;
                }
                holder[0] = node;
            }
            node.start();

            org.opensearch.action.admin.cluster.health.ClusterHealthResponse health = node.client().admin().cluster()
                .prepareHealth()
                .setWaitForYellowStatus()
                .setTimeout(org.opensearch.common.unit.TimeValue.timeValueSeconds(60))
                .get();
            if (health.isTimedOut()) {
                throw new IllegalStateException("cluster health did not reach yellow: " + health.getStatus());
            }

            org.opensearch.http.HttpServerTransport http =
                node.injector().getInstance(org.opensearch.http.HttpServerTransport.class);
            int port = http.boundAddress().publishAddress().getPort();
            stdout.println("ready http://127.0.0.1:" + port);
            stdout.flush();
        } catch (Throwable t) {
            if (stopping.get()) {
                // Shutdown raced with startup; the hook does the rest.
                return;
            }
            System.err.println("launcher: startup failed");
            t.printStackTrace(System.err);
            System.exit(1);
            return;
        }

        // Stay alive on this (non-daemon) thread until the shutdown hook ran.
        while (true) {
            try {
                stopped.await();
                return;
            } catch (InterruptedException ignored) {
                // keep waiting
            }
        }
    }

    private static void deleteTree(Path root) {
        try (java.util.stream.Stream<Path> walk = Files.walk(root)) {
            walk.sorted(java.util.Comparator.reverseOrder()).forEach(p -> {
                try {
                    Files.deleteIfExists(p);
                } catch (IOException ignored) {
                    // best effort
                }
            });
        } catch (IOException ignored) {
            // best effort
        }
    }

    private static Args parse(String[] argv) {
        Args a = new Args();
        for (int i = 0; i < argv.length; i++) {
            String arg = argv[i];
            String value = null;
            int eq = arg.indexOf('=');
            if (arg.startsWith("--") && eq > 0) {
                value = arg.substring(eq + 1);
                arg = arg.substring(0, eq);
            }
            switch (arg) {
                case "--no-stdin":
                    a.watchStdin = false;
                    continue;
                case "--delete-home":
                    a.deleteHome = true;
                    continue;
                case "--home":
                case "--http-port":
                case "--cluster-name":
                case "--log-level":
                case "-E":
                    break;
                default:
                    throw new IllegalArgumentException("unknown argument " + argv[i]);
            }
            if (value == null) {
                if (i + 1 >= argv.length) {
                    throw new IllegalArgumentException(arg + " needs a value");
                }
                value = argv[++i];
            }
            switch (arg) {
                case "--home":
                    a.home = Path.of(value);
                    break;
                case "--http-port":
                    try {
                        a.httpPort = Integer.parseInt(value);
                    } catch (NumberFormatException e) {
                        throw new IllegalArgumentException("bad --http-port " + value);
                    }
                    break;
                case "--cluster-name":
                    a.clusterName = value;
                    break;
                case "--log-level":
                    a.logLevel = value;
                    break;
                default: { // -E key=value
                    int kv = value.indexOf('=');
                    if (kv <= 0) {
                        throw new IllegalArgumentException("-E wants key=value, got " + value);
                    }
                    a.extra.put(value.substring(0, kv), value.substring(kv + 1));
                }
            }
        }
        return a;
    }

    /** WARN+ (or the given level) to stderr; no files, no log4j shutdown hook. */
    private static void configureLogging(String level) {
        ConfigurationBuilder<BuiltConfiguration> b = ConfigurationBuilderFactory.newConfigurationBuilder();
        b.setConfigurationName("fleetview-opensearch-launcher");
        b.setStatusLevel(Level.ERROR);
        b.setShutdownHook("disable");
        b.add(b.newAppender("stderr", "Console")
            .addAttribute("target", ConsoleAppender.Target.SYSTEM_ERR)
            .add(b.newLayout("PatternLayout")
                .addAttribute("pattern", "[%d{ISO8601}][%-5p][%c{1.}] %m%n")));
        b.add(b.newRootLogger(Level.toLevel(level, Level.WARN)).add(b.newAppenderRef("stderr")));
        Configurator.initialize(b.build());
    }
}
