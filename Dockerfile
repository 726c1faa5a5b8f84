# One image for every role (coordinator, launcher, adapter): the package and its console command.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY bus ./bus
COPY agents ./agents
COPY coordinator ./coordinator
RUN pip install --no-cache-dir . && useradd --create-home bus
USER bus
# a directory the user can write: the launcher keeps its prompts and logs under ./.subagent-bus/
WORKDIR /home/bus
ENTRYPOINT ["subagent-bus"]
CMD ["--help"]
